"""Directory trees to and from tar streams (the server's ``/tar`` routes), extracted safely: no
absolute paths, no ``..``, no links that point out of the target, no device files."""

from __future__ import annotations

import os
import tarfile
import tempfile
from typing import IO, Iterator, Tuple


def pack_dir(local_dir: str) -> IO[bytes]:
    """The tree under ``local_dir`` (paths relative to it) as an uncompressed tar in a temporary
    file (in memory up to 32 MiB), positioned at its start."""
    if not os.path.isdir(local_dir):
        raise NotADirectoryError(local_dir)
    buf: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=32 << 20)  # type: ignore[assignment]
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(os.listdir(local_dir)):
            tar.add(os.path.join(local_dir, name), arcname=name, recursive=True)
    buf.seek(0)
    return buf


def walk_dir(local_dir: str) -> Iterator[Tuple[str, str, os.stat_result]]:
    """(relative path, absolute path, lstat) of every entry under ``local_dir``, parents first."""
    for root, dirs, files in os.walk(local_dir):
        dirs.sort()
        for n in sorted(dirs) + sorted(files):
            full = os.path.join(root, n)
            yield os.path.relpath(full, local_dir), full, os.lstat(full)


def _inside(base: str, target: str) -> bool:
    base = os.path.realpath(base)
    return os.path.commonpath([base, os.path.realpath(target)]) == base


def _relative(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    return "" if name == "." else name.rstrip("/")


def extract_stream(fileobj: IO[bytes], dest: str) -> int:
    """Extracts a tar stream into ``dest`` (created) without leaving it; returns the member count."""
    os.makedirs(dest, exist_ok=True)
    n = 0
    with tarfile.open(fileobj=fileobj, mode="r|*") as tar:
        for m in tar:
            name = _relative(m.name)
            if name == "":
                continue
            if os.path.isabs(m.name) or ".." in m.name.split("/"):
                raise ValueError(f"unsafe path in tar stream: {m.name!r}")
            path = os.path.join(dest, name)
            if not _inside(dest, os.path.dirname(path)):
                raise ValueError(f"tar member leaves the target through a link: {m.name!r}")
            if m.issym():
                link = m.linkname if os.path.isabs(m.linkname) else os.path.join(os.path.dirname(path), m.linkname)
                if os.path.isabs(m.linkname) or not _inside(dest, link):
                    raise ValueError(f"symlink out of the target in tar stream: {m.name!r} -> {m.linkname!r}")
            elif m.islnk():
                if os.path.isabs(m.linkname) or ".." in m.linkname.split("/"):
                    raise ValueError(f"hard link out of the target in tar stream: {m.name!r} -> {m.linkname!r}")
            elif not (m.isfile() or m.isdir()):
                continue  # devices and fifos: not part of a working tree
            m.mode &= 0o1777  # no setuid/setgid from the sandbox
            # the files belong to whoever downloads them, not to the sandbox's ids
            m.uid, m.gid, m.uname, m.gname = os.getuid(), os.getgid(), "", ""
            if m.islnk():
                m.linkname = _relative(m.linkname)
            m.name = name
            if hasattr(tarfile, "data_filter"):  # Python >= 3.12 (and backports): checked again by tarfile
                tar.extract(m, dest, set_attrs=not m.issym(), filter="data")
            else:
                tar.extract(m, dest, set_attrs=not m.issym())
            n += 1
    return n
