"""stublinks.py DEST PKG...: link PKG and the distributions it requires (recursively) from this
Python's environment into DEST, skipping those Triton's stub already imports from DEST_SITE.

Triton 2.51's Python stub ignores PYTHONPATH and site; its sys.path is the standard library,
PyTriton's site-packages and the backend folder. test.sh `pip3 install`s torch into the server's
Python for the python_dlpack models: the harness links the client venv's torch (CPU) and its
dependencies into its own copy of the backend folder instead (nothing installed into Triton's
environment)."""

import importlib.metadata as md
import os
import re
import sys


def top_levels(dist):
    names = set()
    for f in dist.files or []:
        head = f.parts[0]
        if head.endswith((".dist-info", ".data")) or head == "..":
            continue
        names.add(head)
    return names


def main(dest, have_site, pkgs):
    seen, todo = set(), list(pkgs)
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        for req in dist.requires or []:
            if "extra ==" not in req:
                todo.append(re.split(r"[\s\[<>=!~;(]", req, maxsplit=1)[0])
        base = str(dist.locate_file(""))
        for top in top_levels(dist):
            if os.path.exists(os.path.join(have_site, top)):
                continue  # the stub's own copy (numpy...) wins
            link = os.path.join(dest, top)
            if not os.path.lexists(link):
                os.symlink(os.path.join(base, top), link)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
