package main

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/gprobes/gprobes/xen"
)

// frames reads guest frames through privcmd and keeps a copy of each.
type frames struct {
	hv   *xen.Hypervisor
	dom  uint16
	seen map[string]string
}

func (f frames) ReadPhys(addr uint64, p []byte) error {
	for len(p) > 0 {
		b, err := f.hv.MapFrame(f.dom, addr>>12, false)
		if err != nil {
			return err
		}
		f.seen[strconv.FormatUint(addr>>12, 16)] = hex.EncodeToString(b)
		n := copy(p, b[addr&0xfff:])
		xen.UnmapFrame(b)
		p, addr = p[n:], addr+uint64(n)
	}
	return nil
}

func run(args []string) error {
	if len(args) == 3 && args[0] == "step" {
		dom, err := strconv.Atoi(args[1])
		if err != nil {
			return err
		}
		res, err := xen.StepEvent(dom, args[2], 5*time.Second)
		json.NewEncoder(os.Stdout).Encode(res)
		return err
	}
	if len(args) != 2 {
		return errors.New("usage: xenrecord DOMID VADDR | xenrecord step DOMID debug|vmevent")
	}
	dom, err := strconv.Atoi(args[0])
	if err != nil {
		return err
	}
	va, err := strconv.ParseUint(args[1], 0, 64)
	if err != nil {
		return err
	}
	hv, err := xen.OpenHypervisor()
	if err != nil {
		return err
	}
	defer hv.Close()
	d := uint16(dom)
	info, err := hv.Info(d)
	if err != nil {
		return err
	}
	if err := hv.Pause(d); err != nil {
		return err
	}
	defer hv.Unpause(d)
	var ctx xen.Context
	if err := hv.GetContext(d, 0, &ctx); err != nil {
		return err
	}
	mem := frames{hv, d, map[string]string{}}
	tr, err := xen.Translate(mem, xen.PagingOf(ctx.CR(4), 64), ctx.CR(3), ctx.CR(4), va&^0xfff)
	if err != nil {
		return fmt.Errorf("translate %#x (cr3 %#x cr4 %#x): %w", va, ctx.CR(3), ctx.CR(4), err)
	}
	phys := tr.Phys + va&0xfff
	b := make([]byte, 64)
	if err := mem.ReadPhys(phys, b); err != nil {
		return err
	}
	rec := Record{Domain: dom, Flags: info.Flags, Context: hex.EncodeToString(ctx[:]), VA: va, Phys: phys,
		Bytes: hex.EncodeToString(b), Frames: mem.seen}
	e := json.NewEncoder(os.Stdout)
	e.SetIndent("", " ")
	return e.Encode(rec)
}
