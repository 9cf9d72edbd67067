#!/bin/bash
# extract-vmlinux.sh BZIMAGE OUT
#
# Write the ELF vmlinux that is compressed inside an x86 bzImage to OUT.
# The compressed payload is found through the boot protocol header
# (setup_sects at 0x1f1, payload_offset at 0x248, payload_length at 0x24c,
# boot protocol 2.08+), identified by its magic and decompressed with the
# matching tool. The kernel build appends the decompressed size as 4 bytes to
# the payload; they are cut off and checked against the output. If the header
# does not lead to a known magic, the file is scanned for the magics the way
# the kernel's scripts/extract-vmlinux does, and the first candidate that
# decompresses to an ELF wins.
#
# The result is the kernel's vmlinux.bin (objcopy -R .comment -S vmlinux):
# no symbol table, but every allocated section, .BTF and .BTF_ids included.
set -euo pipefail
IN=${1:?usage: extract-vmlinux.sh BZIMAGE OUT}
OUT=${2:?usage: extract-vmlinux.sh BZIMAGE OUT}
[ -r "$IN" ] || { echo "extract-vmlinux: cannot read $IN" >&2; exit 1; }
TMP=$(mktemp "$OUT.XXXXXX")
chmod 644 "$TMP"
trap 'rm -f "$TMP"' EXIT

u8() { od -An -v -t u1 -j "$1" -N 1 "$IN" | tr -d ' \n'; }
u32() { od -An -v -t u4 -j "$1" -N 4 "$IN" | tr -d ' \n'; }
hex() { od -An -v -t x1 -j "$1" -N "$2" "$IN" | tr -d ' \n'; }

# The decompressor for the magic found at file offset $1 (empty if none).
tool_at() {
	local m
	m=$(hex "$1" 6)
	case $m in
	1f8b08*) echo "gzip -dc" ;;
	fd377a585a00) echo "xz -dc --single-stream" ;;
	28b52ffd*) echo "zstd -dcq" ;;
	02214c18*) echo "lz4 -dc" ;;
	425a68*) echo "bzip2 -dc" ;;
	5d0000*) echo "unlzma -c" ;;
	894c5a*) echo "lzop -dc" ;;
	esac
}

is_elf() { [ "$(od -An -t x1 -N 4 "$1" | tr -d ' \n')" = 7f454c46 ]; }

# 1. Boot protocol header.
if [ "$(hex $((0x202)) 4)" = 48647253 ]; then # "HdrS"
	ss=$(u8 $((0x1f1)))
	[ "$ss" = 0 ] && ss=4
	po=$(u32 $((0x248)))
	pl=$(u32 $((0x24c)))
	start=$(((ss + 1) * 512 + po))
	tool=$(tool_at "$start")
	if [ -n "$tool" ] && [ "$pl" -gt 4 ]; then
		want=$(od -An -v -t u4 -j $((start + pl - 4)) -N 4 "$IN" | tr -d ' \n')
		if tail -c +$((start + 1)) "$IN" | head -c $((pl - 4)) | $tool >"$TMP" 2>/dev/null || is_elf "$TMP"; then
			got=$(stat -c %s "$TMP")
			if is_elf "$TMP"; then
				[ "$got" = "$want" ] || echo "extract-vmlinux: warning: size $got, header says $want" >&2
				echo "extract-vmlinux: ${tool%% *} payload at $start, $pl bytes -> $got bytes" >&2
				mv "$TMP" "$OUT"
				trap - EXIT
				exit 0
			fi
		fi
	fi
fi

# 2. Scan for compressor magics.
scan() { # $1 = magic as printf escapes, $2 = tool
	local pos
	for pos in $(tr "$1\n$3" "\n$3=" <"$IN" | grep -abo "^$3" | cut -d: -f1); do
		# the magic's first byte became the newline ending the previous line,
		# so the 1-based offset $pos is the 0-based offset of the magic
		tail -c +"$pos" "$IN" | $2 >"$TMP" 2>/dev/null || :
		if is_elf "$TMP"; then
			echo "extract-vmlinux: ${2%% *} payload found by scan at $((pos - 1))" >&2
			mv "$TMP" "$OUT"
			trap - EXIT
			exit 0
		fi
	done
}
scan '\037\213\010' "gzip -dc" xy
scan '\3757zXZ\000' "xz -dc --single-stream" abcde
scan '(\265/\375' "zstd -dcq" xxx
scan '\002!L\030' "lz4 -dc" xxx
scan 'BZh' "bzip2 -dc" xy
scan '\135\000\000\000' "unlzma -c" xxx
echo "extract-vmlinux: no compressed ELF found in $IN" >&2
exit 1
