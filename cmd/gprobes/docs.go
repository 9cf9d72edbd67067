package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

const bashCompletion = `# bash completion for gprobes: source this file, or put it in
# /etc/bash_completion.d/gprobes (gprobes completion bash > ...).
_gprobes() {
	local cur words opts
	cur="${COMP_WORDS[COMP_CWORD]}"
	words=("${COMP_WORDS[@]:0:COMP_CWORD}")
	if [[ "$cur" == -* ]]; then
		opts=$("${words[@]}" "$cur" --generate-bash-completion 2>/dev/null)
	else
		opts=$("${words[@]}" --generate-bash-completion 2>/dev/null)
	fi
	COMPREPLY=($(compgen -W "$opts" -- "$cur"))
	if [[ ${#COMPREPLY[@]} -eq 0 ]]; then
		COMPREPLY=($(compgen -f -- "$cur"))
	fi
}
complete -o filenames -F _gprobes gprobes
`

const zshCompletion = `#compdef gprobes
# zsh completion for gprobes: gprobes completion zsh > "${fpath[1]}/_gprobes"
_gprobes() {
	local -a opts
	local cur=${words[-1]}
	if [[ "$cur" == -* ]]; then
		opts=("${(@f)$(${words[@]:0:#words[@]-1} $cur --generate-bash-completion 2>/dev/null)}")
	else
		opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion 2>/dev/null)}")
	fi
	if [[ -n "${opts[1]}" ]]; then
		_describe 'values' opts
	else
		_files
	fi
}
compdef _gprobes gprobes
`

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script (bash or zsh)",
		ArgsUsage: "bash|zsh",
		Action: func(c *cli.Context) error {
			switch c.Args().First() {
			case "bash", "":
				fmt.Fprint(c.App.Writer, bashCompletion)
			case "zsh":
				fmt.Fprint(c.App.Writer, zshCompletion)
			default:
				return cli.Exit("completion: bash or zsh", 2)
			}
			return nil
		},
	}
}

func manCommand() *cli.Command {
	return &cli.Command{
		Name:  "man",
		Usage: "print the manual page (roff), or the Markdown CLI reference with --markdown",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "markdown", Usage: "print Markdown (docs/cli.md) instead of roff"}},
		Action: func(c *cli.Context) error {
			var out string
			var err error
			if c.Bool("markdown") {
				out, err = c.App.ToMarkdown()
			} else {
				out, err = c.App.ToMan()
			}
			if err != nil {
				return err
			}
			fmt.Fprint(c.App.Writer, out)
			return nil
		},
	}
}
