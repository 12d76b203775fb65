"""check_record.py ROOT RECORD PINNED_SHA256 PROG: every file of an unpacked
wheel under ROOT against its RECORD (sha256, urlsafe base64, as pip writes it),
the RECORD itself against the sha256 pinned in wheels.txt, and no file that the
RECORD does not list. Used by install.sh (on the GPU machine) and
fa4_sass/setup.sh for the CuTe DSL compiler, which travels unpacked and
recompressed, so its wheel's own hash cannot be checked. Exits non-zero, saying
which file failed, prefixed with PROG."""
import base64
import hashlib
import os
import sys


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h


def main(root, record, pinned, prog):
    if sha(os.path.join(root, record)).hexdigest() != pinned:
        sys.exit(f"{prog}: {record} does not match its pinned sha256")
    listed = set()
    for line in open(os.path.join(root, record)):
        path, digest, _ = line.rstrip("\n").rsplit(",", 2)
        listed.add(path)
        if path == record:
            continue
        algo, want = digest.split("=", 1)
        got = base64.urlsafe_b64encode(sha(os.path.join(root, path)).digest()).rstrip(b"=").decode()
        if algo != "sha256" or got != want:
            sys.exit(f"{prog}: {path} does not match the RECORD")
    present = {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}
    if present != listed:
        sys.exit(f"{prog}: files not in the RECORD: {sorted(present - listed)}; missing: {sorted(listed - present)}")
    print(f"{prog}: {len(listed)} files of {record.split('.dist-info')[0]} match the pinned RECORD")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
