"""Files: bytes and modes round trip; directory trees go up (tar, or file by file against a server
without the tar route) and come down as tar."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from minisandbox import NotFoundError, RemoteSandbox


def test_file_round_trip_with_mode(sandbox: RemoteSandbox, tmp_path: Path) -> None:
    blob = bytes([0, 1, 2, 255, 10]) * 1000
    sandbox.write_file("/work/sub/blob.bin", blob, mode=0o750)
    data, mode = sandbox.read_file_with_mode("/work/sub/blob.bin")
    assert data == blob and mode == 0o750
    assert sandbox.exec("stat -c %a /work/sub/blob.bin").stdout == "750\n"
    sandbox.write_file("/work/hello.txt", "héllo\n")
    assert sandbox.read_text("/work/hello.txt") == "héllo\n"

    local = tmp_path / "run.sh"
    local.write_text("#!/bin/sh\necho ran\n")
    os.chmod(local, 0o755)
    sandbox.upload_file(str(local), "/usr/local/bin/run.sh")
    assert sandbox.exec("/usr/local/bin/run.sh").stdout == "ran\n"
    back = tmp_path / "back.sh"
    sandbox.download_file("/usr/local/bin/run.sh", str(back))
    assert back.read_text() == local.read_text() and os.stat(back).st_mode & 0o777 == 0o755

    with pytest.raises(NotFoundError) as e:
        sandbox.read_file("/no/such/file")
    assert e.value.code == "SANDBOX_FILE" and not e.value.missing_route


def make_tree(root: Path) -> None:
    (root / "pkg" / "empty").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("print('hi')\n")
    (root / "run.sh").write_text("#!/bin/sh\necho tree\n")
    os.chmod(root / "run.sh", 0o755)
    (root / ".hidden").write_bytes(b"\x00secret")
    os.symlink("pkg/mod.py", root / "link.py")


def test_upload_dir(sandbox: RemoteSandbox, tmp_path: Path) -> None:
    src = tmp_path / "src"
    make_tree(src)
    sandbox.upload_dir(str(src), "/work/up")
    r = sandbox.exec("cd /work/up && ls -a1 . pkg && ./run.sh && readlink link.py && cat link.py && test -d pkg/empty && stat -c %a run.sh")
    assert r.ok, r.stderr
    assert r.stdout == ".:\n.\n..\n.hidden\nlink.py\npkg\nrun.sh\n\npkg:\n.\n..\nempty\nmod.py\ntree\npkg/mod.py\nprint('hi')\n755\n"
    assert sandbox.read_file("/work/up/.hidden") == b"\x00secret"


def test_download_dir_round_trip(sandbox: RemoteSandbox, tmp_path: Path, need) -> None:  # type: ignore[no-untyped-def]
    need("GET", "/v1/sandboxes/{id}/tar")
    need("PUT", "/v1/sandboxes/{id}/tar")
    src = tmp_path / "src"
    make_tree(src)
    sandbox.upload_dir(str(src), "/work/up")
    sandbox.exec("echo made-inside > /work/up/pkg/new.txt").check()
    dst = tmp_path / "dst"
    n = sandbox.download_dir("/work/up", str(dst))
    assert n >= 6
    assert (dst / "pkg" / "mod.py").read_text() == "print('hi')\n"
    assert (dst / "pkg" / "new.txt").read_text() == "made-inside\n"
    assert (dst / ".hidden").read_bytes() == b"\x00secret"
    assert os.readlink(dst / "link.py") == "pkg/mod.py"
    assert os.stat(dst / "run.sh").st_mode & 0o777 == 0o755
    assert (dst / "pkg" / "empty").is_dir()


def test_list_files(sandbox: RemoteSandbox, need) -> None:  # type: ignore[no-untyped-def]
    need("GET", "/v1/sandboxes/{id}/files/list")
    sandbox.write_file("/work/l/a.txt", "abc", mode=0o640)
    sandbox.exec("mkdir -p /work/l/d && ln -s a.txt /work/l/s").check()
    entries = {e.name: e for e in sandbox.list_files("/work/l")}
    assert set(entries) == {"a.txt", "d", "s"}
    assert (entries["a.txt"].type, entries["a.txt"].size, entries["a.txt"].mode) == ("file", 3, "640")
    assert entries["d"].type == "dir" and entries["s"].type == "symlink"
