package main

import (
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/sim"
)

func simCommand() *cli.Command {
	return &cli.Command{
		Name:  "sim",
		Usage: "run one probe's program off-line against registers and memory you give, or an ELF core",
		Description: `Runs probe N of FILE (0-based, in file order) --hits times against the same state and
prints each hit's outcome, its committed log, the variables and whether the probe ended up
disabled. Memory given with --mem is readable and writable; every other address faults, as an
unmapped address would. VALUE and ADDR take decimal or 0x hex. A tracepoint probe's push field
reads the fields given with --field; a retprobe's program runs as at the function's return
(give the return value as --reg rax=VALUE), a watch probe's as after the access (--reg rip is
the next instruction). Every hit is in one call, whose instance variables (push iv, pop iv)
start as --iv gives them, 0 otherwise, and are printed after the hits. A probe with
"enabled = no" runs as if switched on. enable and disable are printed under the hit that ran
them; the simulator runs one probe, so a switch changes nothing else, except that a disable of
the probe's own minor leaves its later hits not run ("off").

With --json it prints exactly one JSON object:
  {"hits":[{"outcome":"exit","exit":1,"exception":"","major":1,"minor":2,
            "log":"0a00000000000000","truncated":false}],"lv":["0","3"],"gv":[],"disabled":false}
outcome is exit, abort, rem, exception, skipped or off; exception is "", invalid-address,
max-jumps, call-depth, divide-by-zero or invalid-operand; log is the hex of the committed
bytes, empty when nothing is committed. A hit that ran enable or disable has
"switches":["enable 3","disable 4"]; "iv":["0",...] (8 words) is there when the probe uses
instance variables or --iv is given.`,
		ArgsUsage: "FILE.dpdf|FILE.ppdf|-",
		Flags: append(sourceFlags(),
			&cli.IntFlag{Name: "probe", Value: 0, Usage: "run probe `N` (0-based, in file order)"},
			&cli.IntFlag{Name: "hits", Value: 1, Usage: "run it `N` times in a row against the same state"},
			&cli.StringSliceFlag{Name: "reg", Usage: "set register `NAME=VALUE` (every other register reads 0)"},
			&cli.StringSliceFlag{Name: "mem", Usage: "make memory `ADDR=HEXBYTES` exist (readable and writable)"},
			&cli.StringSliceFlag{Name: "lv", Usage: "set local variable `I=V` before the first hit"},
			&cli.StringSliceFlag{Name: "gv", Usage: "set global variable `I=V` before the first hit"},
			&cli.StringSliceFlag{Name: "iv", Usage: "set the call's instance variable `I=V` (I 0..7) before the first hit, for push iv"},
			&cli.StringSliceFlag{Name: "io", Usage: "make IO port `PORT=VALUE` exist (without any, programs using port IO are refused)"},
			&cli.StringFlag{Name: "pid", Usage: "value of push pid"},
			&cli.StringFlag{Name: "tid", Usage: "value of push tid"},
			&cli.StringFlag{Name: "procid", Usage: "value of push procid"},
			&cli.StringFlag{Name: "task", Usage: "value of push task (without it, push task is an invalid-operand exception)"},
			&cli.StringFlag{Name: "ts", Usage: "value of push ts"},
			&cli.StringSliceFlag{Name: "field", Usage: "give the tracepoint event's field `NAME=VALUE` for push field (a string's or array's address; a field not given is an invalid-operand exception)"},
			&cli.StringFlag{Name: "core", Usage: "take the registers of the first thread and the memory of ELF core `FILE`"},
			&cli.BoolFlag{Name: "json", Usage: "print exactly one JSON object"},
		),
		Action: func(c *cli.Context) error {
			in, rest, err := inputArg(c, "sim")
			if err != nil {
				return err
			}
			if len(rest) > 0 {
				return cli.Exit("sim: name one DPDF or PPDF file", 2)
			}
			l, err := load(c, in)
			if err != nil {
				return err
			}
			env, err := simEnv(c, l.mod.Arch)
			if err != nil {
				return cli.Exit("sim: "+err.Error(), 2)
			}
			opts := sim.Options{Probe: c.Int("probe"), Hits: c.Int("hits")}
			if opts.LV, err = assignments(c.StringSlice("lv"), "--lv"); err != nil {
				return cli.Exit("sim: "+err.Error(), 2)
			}
			if opts.GV, err = assignments(c.StringSlice("gv"), "--gv"); err != nil {
				return cli.Exit("sim: "+err.Error(), 2)
			}
			if opts.IV, err = assignments(c.StringSlice("iv"), "--iv"); err != nil {
				return cli.Exit("sim: "+err.Error(), 2)
			}
			if opts.Hits < 1 {
				return cli.Exit("sim: --hits must be at least 1", 2)
			}
			rep, err := sim.Run(l.prog, env, opts)
			if err != nil {
				return cli.Exit("sim: "+err.Error(), 1)
			}
			if c.Bool("json") {
				return rep.WriteJSON(c.App.Writer)
			}
			rep.WriteText(c.App.Writer)
			return nil
		},
	}
}

// simEnv builds the simulated target from the flags.
func simEnv(c *cli.Context, arch rpn.Arch) (*sim.Env, error) {
	env := sim.NewEnv()
	if core := c.String("core"); core != "" {
		if err := env.LoadCore(core); err != nil {
			return nil, err
		}
	}
	for _, a := range c.StringSlice("reg") {
		name, val, ok := strings.Cut(a, "=")
		if !ok {
			return nil, fmt.Errorf("--reg %s: want NAME=VALUE", a)
		}
		v, err := parseValue(val)
		if err != nil {
			return nil, fmt.Errorf("--reg %s: %v", a, err)
		}
		if err := env.SetRegByName(arch, strings.TrimSpace(name), v); err != nil {
			return nil, fmt.Errorf("--reg %s: %v", a, err)
		}
	}
	for _, a := range c.StringSlice("mem") {
		addr, hexBytes, ok := strings.Cut(a, "=")
		if !ok {
			return nil, fmt.Errorf("--mem %s: want ADDR=HEXBYTES", a)
		}
		at, err := parseValue(addr)
		if err != nil {
			return nil, fmt.Errorf("--mem %s: %v", a, err)
		}
		data, err := hex.DecodeString(strings.TrimPrefix(strings.ReplaceAll(hexBytes, " ", ""), "0x"))
		if err != nil {
			return nil, fmt.Errorf("--mem %s: the bytes must be hex digits, two per byte: %v", a, err)
		}
		if err := env.AddMem(at, data); err != nil {
			return nil, fmt.Errorf("--mem: %v", err)
		}
	}
	for _, a := range c.StringSlice("field") {
		name, val, ok := strings.Cut(a, "=")
		name = strings.TrimSpace(name)
		if !ok {
			return nil, fmt.Errorf("--field %s: want NAME=VALUE", a)
		}
		if !rpn.ValidFieldName(name) {
			return nil, fmt.Errorf("--field %s: %q is not a field name (letters, digits and _, as the event's format names it)", a, name)
		}
		v, err := parseValue(val)
		if err != nil {
			return nil, fmt.Errorf("--field %s: %v", a, err)
		}
		env.SetField(name, v)
	}
	ports, err := assignments(c.StringSlice("io"), "--io")
	if err != nil {
		return nil, err
	}
	for p, v := range ports {
		env.AddIO(p, v)
	}
	for _, s := range []struct {
		flag string
		v    rpn.SysValue
	}{{"pid", rpn.SysPID}, {"tid", rpn.SysTID}, {"procid", rpn.SysProcID}, {"task", rpn.SysTask}, {"ts", rpn.SysTS}} {
		if !c.IsSet(s.flag) {
			continue
		}
		v, err := parseValue(c.String(s.flag))
		if err != nil {
			return nil, fmt.Errorf("--%s: %v", s.flag, err)
		}
		env.SetSys(s.v, v)
	}
	return env, nil
}

// assignments parses I=V pairs.
func assignments(list []string, flag string) (map[uint64]uint64, error) {
	if len(list) == 0 {
		return nil, nil
	}
	out := map[uint64]uint64{}
	for _, a := range list {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return nil, fmt.Errorf("%s %s: want I=V", flag, a)
		}
		i, err := parseValue(k)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %v", flag, a, err)
		}
		x, err := parseValue(v)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %v", flag, a, err)
		}
		out[i] = x
	}
	return out, nil
}

// parseValue reads decimal or 0x hex; a leading minus gives the two's
// complement.
func parseValue(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	if s == "" {
		return 0, fmt.Errorf("empty value")
	}
	v, err := dpdf.ParseNumber(s)
	if err != nil && s != "0" {
		return 0, err
	}
	if neg {
		v = -v
	}
	return v, nil
}
