#!/usr/bin/env python3
"""Give a copy of librcclx.so another SONAME, in place: ``set-soname.py FILE NAME``.

librcclx.so is linked with the SONAME ``librcclx.so.0`` (build/main.rs), 13 bytes, so a name of
up to 13 bytes fits where it is: ``libnccl.so.2`` and ``librccl.so.1`` for the copies
scripts/install.sh puts under the stock libraries' names, so that a program linked against
``PREFIX/lib`` records (DT_NEEDED) the stock library's name. Only the SONAME string in
``.dynstr`` changes; the script refuses (exit 1) a file that is not a 64-bit little-endian ELF
shared object, whose SONAME is not ``librcclx.so.0``, or whose string is shared with another
dynamic-section entry or symbol name. Standard library only.
"""
import struct
import sys

PLACEHOLDER = b"librcclx.so.0"
DT_NEEDED, DT_STRTAB, DT_SYMTAB, DT_STRSZ, DT_SONAME = 1, 5, 6, 10, 14


def set_soname(path, name):
    new = name.encode()
    if not 0 < len(new) <= len(PLACEHOLDER) or b"\0" in new:
        raise ValueError(f"{name!r}: a SONAME of 1 to {len(PLACEHOLDER)} bytes")
    data = bytearray(open(path, "rb").read())
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1 or struct.unpack_from("<H", data, 16)[0] != 3:
        raise ValueError("not a 64-bit little-endian ELF shared object")
    phoff, = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    shoff, = struct.unpack_from("<Q", data, 40)
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    loads, dynamic = [], None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from("<IIQQQQQQ", data, phoff + i * phentsize)
        if p_type == 1:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == 2:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        raise ValueError("no dynamic section")

    def file_offset(vaddr):
        for v, o, sz in loads:
            if v <= vaddr < v + sz:
                return o + vaddr - v
        raise ValueError(f"address {vaddr:#x} is in no loaded segment")

    tags = []
    for off in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, val = struct.unpack_from("<qQ", data, off)
        if tag == 0:
            break
        tags.append((tag, val))
    get = dict(tags)
    if DT_SONAME not in get:
        raise ValueError("no SONAME (a library built before build/main.rs set librcclx.so.0?)")
    strtab = file_offset(get[DT_STRTAB])
    at = get[DT_SONAME]
    old = bytes(data[strtab + at:data.index(b"\0", strtab + at)])
    if old == new:
        return old
    if old != PLACEHOLDER:
        raise ValueError(f"SONAME is {old.decode(errors='replace')!r}, not {PLACEHOLDER.decode()!r}")
    # No other name may point into the string (linkers merge suffixes of strings).
    span = range(at, at + len(PLACEHOLDER) + 1)
    others = [v for t, v in tags if t == DT_NEEDED]
    for i in range(shnum):
        sh = struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
        if sh[1] == 11:  # SHT_DYNSYM
            for s in range(sh[4], sh[4] + sh[5], sh[9] or 24):
                others.append(struct.unpack_from("<I", data, s)[0])
    if any(v in span and v != at for v in others) or others.count(at):
        raise ValueError("the SONAME string is shared with another name")
    data[strtab + at:strtab + at + len(PLACEHOLDER) + 1] = new.ljust(len(PLACEHOLDER) + 1, b"\0")
    with open(path, "wb") as f:
        f.write(data)
    return old


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        sys.exit(2)
    try:
        set_soname(sys.argv[1], sys.argv[2])
    except (OSError, ValueError, struct.error) as e:
        print(f"set-soname.py {sys.argv[1]}: {e}", file=sys.stderr)
        sys.exit(1)
