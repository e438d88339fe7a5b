"""The machine code inside a built kernel library, per device function.

A library embeds its cubins (ELF) in its fat binary. Reading their `.text.<function>` sections
lets cutsearch prove that two builds of one kernel (alone, or sharing a translation unit) are
the same machine code, without cuobjdump.
"""

from __future__ import annotations

import struct
from pathlib import Path

_ELF = b"\x7fELF"


def device_code(library: Path) -> dict[str, bytes]:
    """{mangled function name: its SASS bytes} over every cubin embedded in `library`."""
    data = Path(library).read_bytes()
    code: dict[str, bytes] = {}
    at = data.find(_ELF, 1)  # offset 0 is the host library itself
    while at >= 0:
        for name, body in _sections(data, at).items():
            if name.startswith(".text."):
                code[name[len(".text."):]] = body
        at = data.find(_ELF, at + 1)
    return code


def _sections(data: bytes, base: int) -> dict[str, bytes]:
    """Sections of the little-endian ELF64 image at `base`; empty if it is not one."""
    try:
        if data[base + 4] != 2 or data[base + 5] != 1:
            return {}
        (shoff,) = struct.unpack_from("<Q", data, base + 0x28)
        entsize, count, names_index = struct.unpack_from("<HHH", data, base + 0x3A)
        headers = [struct.unpack_from("<IIQQQQ", data, base + shoff + i * entsize) for i in range(count)]
        names_at = base + headers[names_index][4]
        out = {}
        for name, _type, _flags, _addr, offset, size in headers:
            end = data.index(b"\0", names_at + name)
            out[data[names_at + name:end].decode()] = data[base + offset:base + offset + size]
        return out
    except (struct.error, IndexError, ValueError, UnicodeDecodeError):
        return {}
