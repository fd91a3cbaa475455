"""A downloaded tree cannot write outside its target: ``..``, absolute names and links out of the
target are refused before anything of theirs is written (no server needed)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from minisandbox._tar import extract_stream


def tar_of(*members: tarfile.TarInfo, data: bytes = b"x") -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for m in members:
            if m.isfile():
                m.size = len(data)
                t.addfile(m, io.BytesIO(data))
            else:
                t.addfile(m)
    buf.seek(0)
    return buf


def sym(name: str, target: str) -> tarfile.TarInfo:
    m = tarfile.TarInfo(name)
    m.type, m.linkname = tarfile.SYMTYPE, target
    return m


@pytest.mark.parametrize(
    "members",
    [
        [tarfile.TarInfo("../evil")],
        [tarfile.TarInfo("a/../../evil")],
        [tarfile.TarInfo("/tmp/evil-abs")],
        [sym("out", "/etc")],
        [sym("out", "../../..")],
        # a link inside the target that points out, then a file written through it
        [sym("d", "../"), tarfile.TarInfo("d/evil")],
    ],
)
def test_refuses_members_that_leave_the_target(tmp_path: Path, members: list) -> None:
    dest = tmp_path / "dest"
    with pytest.raises(ValueError):
        extract_stream(tar_of(*members), str(dest))
    assert not (tmp_path / "evil").exists()


def test_extracts_files_dirs_and_inner_links_without_setuid(tmp_path: Path) -> None:
    d = tarfile.TarInfo("pkg")
    d.type, d.mode = tarfile.DIRTYPE, 0o755
    f = tarfile.TarInfo("pkg/tool")
    f.mode = 0o4755
    n = extract_stream(tar_of(d, f, sym("link", "pkg/tool"), tarfile.TarInfo(".hidden")), str(tmp_path / "dest"))
    assert n == 4
    assert (tmp_path / "dest/pkg/tool").stat().st_mode & 0o7777 == 0o755
    assert (tmp_path / "dest/link").resolve() == (tmp_path / "dest/pkg/tool").resolve()
    assert (tmp_path / "dest/.hidden").read_bytes() == b"x"
