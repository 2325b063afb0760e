#!/usr/bin/env python3
"""parts.py PARTS OBJDIR [EXEMPT-LIST] - check that the files of a program's
parts call one another in one direction only.

PARTS lists the parts in order ("name: file.c file.c ..." lines, a part may
take several lines); a file may use symbols defined by files of its own
part and of the parts before it, never of a later one. OBJDIR holds the
built objects (CMake's CMakeFiles/TARGET.dir; file.c.o, possibly in
subdirectories; several directories joined by ':' for a program linked
from more than one target). A part named like a folder beside PARTS (or FOLDER/NAME:
the parts so named, together) must hold exactly the .c files it lists
(generated files aside). Objects of files no part names (other modules compiled
in) may not use any part's symbols. EXEMPT-LIST is a linker dynamic list
(`{ name; name; };`) of libc entry points a part interposes: using those is
calling libc, not the part. Prints each wrong use, one line each, and exits
1 if there is one.
"""
import pathlib
import re
import subprocess
import sys


def parts_of(path):
    order, part_of = [], {}
    for line in pathlib.Path(path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, files = line.split(":", 1)
        name = name.strip()
        if name not in order:
            order.append(name)
        for f in files.split():
            part_of[f] = name
    return order, part_of


def folders(path, order, part_of):
    """the wrong placements of files in the parts' folders, printed"""
    bad = 0
    top = pathlib.Path(path).parent
    for part in dict.fromkeys(p.split("/")[0] for p in order):
        folder = top / part
        if not folder.is_dir():
            continue
        listed = {f for f, p in part_of.items() if p.split("/")[0] == part}
        present = {f.name for f in folder.glob("*.c")}
        for f in sorted(present - listed):
            print(f"{part}/{f} is not listed in part {part}")
            bad += 1
        for f in sorted(listed - present):
            if not f.endswith("_gen.c"):
                print(f"{f} of part {part} is not in {part}/")
                bad += 1
    return bad


def symbols(objs):
    """{name: (defined, used)} of every object, from one run of nm"""
    table = {name: (set(), set()) for name in objs}
    by_path = {str(o): name for name, o in objs.items()}
    out = subprocess.run(["nm", "-A"] + list(by_path), capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        cut = line.index(".o:") + 2   # nm -A: "PATH:VALUE TYPE NAME"
        f = line[cut + 1:].split()
        defined, used = table[by_path[line[:cut]]]
        if len(f) == 3 and f[1] in "TDBRGSV":
            defined.add(f[2])
        elif len(f) == 2 and f[0] == "U":
            used.add(f[1])
    return table


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__.split("\n\n")[0])
    order, part_of = parts_of(sys.argv[1])
    exempt = set()
    if len(sys.argv) == 4:
        exempt = set(re.findall(r"\b([A-Za-z_]\w*)\s*;", pathlib.Path(sys.argv[3]).read_text()))
    objs = {o.name[:-2]: o for d in sys.argv[2].split(":") for o in pathlib.Path(d).rglob("*.c.o")}
    bad = folders(sys.argv[1], order, part_of)
    missing = sorted(f for f in part_of if f not in objs)
    if missing:
        sys.exit("parts.py: not built: " + " ".join(missing))
    table = symbols(objs)
    owner = {s: name for name, (d, _) in table.items() for s in d}
    for name, (_, used) in sorted(table.items()):
        mine = part_of.get(name)
        for s in sorted(used - exempt):
            other = owner.get(s)
            if other is None or other == name or other not in part_of:
                continue
            theirs = part_of[other]
            if mine is None or order.index(theirs) > order.index(mine):
                print(f"{name} ({mine or 'no part'}) uses {s} of {other} ({theirs})")
                bad += 1
    print(f"parts.py: {len(objs)} objects, {bad} wrong uses")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
