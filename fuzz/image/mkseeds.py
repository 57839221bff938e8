import io, tarfile, gzip, sys, os
out = sys.argv[1]
def T(name, kind=tarfile.REGTYPE, data=b"", link="", mode=0o644):
    t = tarfile.TarInfo(name); t.type = kind; t.linkname = link; t.mode = mode; t.size = len(data) if kind == tarfile.REGTYPE and not link else 0
    return t, data
def tar(ents):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for t, d in ents: tf.addfile(t, io.BytesIO(d) if t.size else None)
    v = b.getvalue().rstrip(b"\0")  # no 10 KiB record padding in committed seeds
    return v + b"\0" * (-len(v) % 512 + 1024)
seeds = {
 "normal": [T("d/", tarfile.DIRTYPE, mode=0o755), T("d/f", data=b"hi"), T("l", tarfile.SYMTYPE, link="d"), T("h", tarfile.LNKTYPE, link="d/f")],
 "whiteouts": [T("d/", tarfile.DIRTYPE), T("d/.wh..wh..opq"), T(".wh.x"), T("d/.wh..")],
 "dotdot": [T("../../etc/x", data=b"x"), T("/x", data=b"y")],
 "symlink-out": [T("a", tarfile.SYMTYPE, link="/etc"), T("a/x", data=b"x")],
 "symlink-up": [T("a", tarfile.SYMTYPE, link="../../.."), T("a/x", data=b"x"), T("a/.wh.x")],
 "hardlink-out": [T("h", tarfile.LNKTYPE, link="../canary/file"), T("g", tarfile.LNKTYPE, link="/etc/shadow")],
 "dups": [T("x", data=b"1"), T("x/", tarfile.DIRTYPE), T("x/y", data=b"2"), T("x", data=b"3")],
 "special": [T("c", tarfile.CHRTYPE), T("p", tarfile.FIFOTYPE), T("s", data=b"x", mode=0o6755)],
}
os.makedirs(out, exist_ok=True)
for k, v in seeds.items():
    open(os.path.join(out, k + ".tar"), "wb").write(tar(v))
open(os.path.join(out, "normal.tar.gz"), "wb").write(gzip.compress(tar(seeds["normal"]), mtime=0))
