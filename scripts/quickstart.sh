#!/bin/bash
# Quick start: install dependencies, build, install, and run a short demo:
# checkpoint a sample data set into a store, list it, verify it, then corrupt a
# copy and watch Stasis refuse it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --install build >/dev/null
echo "installed $(command -v stasis): $(stasis --version)"

demo=$(mktemp -d /tmp/stasis-demo.XXXXXX)
trap 'rm -rf "$demo"' EXIT
cd "$demo"
# A sample data set: a 32 MiB grid with empty (all-zero) regions, and a log.
python3 - <<'PY'
import math, os, struct
rows, cols = 1024, 4096
with open("grid.f64", "wb") as f:
    for r in range(rows):
        if (r // 128) % 2:
            f.write(bytes(cols * 8))
        else:
            f.write(struct.pack(f"{cols}d", *(math.sin(r * 0.01) * math.cos(c * 0.01) for c in range(cols))))
with open("run.log", "w") as f:
    f.write("".join(f"step {i} residual {1.0 / (i + 1):.6e}\n" for i in range(1000)))
PY
run() { echo; echo "\$ $*"; "$@"; }
run stasis save --dir store --job demo grid.f64 run.log
run stasis save --dir store --job demo grid.f64 run.log
run stasis ls --dir store
run stasis inspect store/demo/ckpt-000002/files.img
run stasis verify store/demo
run stasis extract store/demo/ckpt-000002/files.img grid.f64 restored.f64
run cmp grid.f64 restored.f64 && echo "restored grid.f64 is bit-identical"
cp store/demo/ckpt-000002/files.img damaged.img
python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(100000); b = f.read(1); f.seek(100000); f.write(bytes([b[0] ^ 0xff]))' damaged.img
echo; echo "\$ stasis verify damaged.img   # one byte flipped in a copy"
if stasis verify damaged.img; then
	echo "ERROR: a damaged image was accepted" >&2
	exit 1
fi
echo "(refused, as it must be)"
