"""Rewrites the scheduling control bits of every FFMA in the sm_90a cubins embedded in a shared object, to test
whether the block-scaled mainloop's fold (64 FFMAs a thread per K tile) is limited by how the warp schedulers
interleave it with the other warps' work (docs/blockwise.md, "The fold is the gap").

  python scripts/patch_ffma_control_bits.py IN.so OUT.so MODE

MODE:
  yield    every FFMA yields (its yield flag cleared) and keeps no operand in the reuse cache (a yielding
           instruction must not rely on it);
  noyield  no FFMA yields;
  stallN   every FFMA waits at least N cycles before the warp's next instruction issues (N = 2 .. 15).

ptxas itself alternates yielding and non-yielding FFMAs in the fold, stall 1 each; these modes replace that pattern
with uniform ones. Only control bits change, never an instruction, so results stay bit for bit the same (the probe
checks them). This works only on cubins stored uncompressed in the fatbin, which nvcc's default build gives.

Encoding (sm_90 SASS, 128-bit instructions, little endian; bits of the high 64-bit word): 41-44 stall cycles, 45
yield flag (0 = yield), 58-61 operand reuse flags. FFMA with three register operands is opcode 0x223 in the low
12 bits of the low word.
"""
import re
import struct
import sys

YIELD = 1 << 45
REUSE = 0xF << 58
STALL_SHIFT, STALL_MASK = 41, 0xF
FFMA_RRR = 0x223


def patched(hi: int, mode: str) -> int:
    if mode == "yield":
        return hi & ~YIELD & ~REUSE
    if mode == "noyield":
        return hi | YIELD
    if mode.startswith("stall"):
        want = int(mode[len("stall"):])
        if not 2 <= want <= STALL_MASK:
            raise SystemExit(f"stall cycles must be 2..{STALL_MASK}")
        if (hi >> STALL_SHIFT) & STALL_MASK < want:
            return (hi & ~(STALL_MASK << STALL_SHIFT)) | (want << STALL_SHIFT)
        return hi
    raise SystemExit(f"unknown mode {mode!r}")


def text_sections(data: bytearray, start: int):
    """(offset, size) in data of each .text.* section of the ELF (a cubin) that starts at `start`."""
    shoff, = struct.unpack_from("<Q", data, start + 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, start + 0x3a)

    def header(i):
        base = start + shoff + i * shentsize
        name, kind = struct.unpack_from("<II", data, base)
        offset, size = struct.unpack_from("<QQ", data, base + 0x18)
        return name, kind, offset, size

    names = start + header(shstrndx)[2]
    for i in range(shnum):
        name, kind, offset, size = header(i)
        label = bytes(data[names + name:data.index(b"\0", names + name)])
        if label.startswith(b".text.") and kind == 1:  # SHT_PROGBITS
            yield start + offset, size


def main():
    src, dst, mode = sys.argv[1:4]
    data = bytearray(open(src, "rb").read())
    found = changed = 0
    # The host ELF starts at 0; every other ELF header in the file is an embedded cubin.
    for m in re.finditer(rb"\x7fELF\x02\x01\x01", bytes(data)):
        if m.start() == 0:
            continue
        for offset, size in text_sections(data, m.start()):
            for at in range(offset, offset + size, 16):
                lo, hi = struct.unpack_from("<QQ", data, at)
                if lo & 0xFFF != FFMA_RRR:
                    continue
                found += 1
                new = patched(hi, mode)
                if new != hi:
                    changed += 1
                    struct.pack_into("<Q", data, at + 8, new)
    with open(dst, "wb") as f:
        f.write(data)
    print(f"{mode}: {found} FFMA, {changed} changed")


if __name__ == "__main__":
    main()
