#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Keeps vmtraced's shape: reads the design (docs/design.ini: modules,
their files, the arrows allowed, the nevers), the #include graph of the
sources and the link lines make would run, and fails (exit 1, one line a
finding) on

  - a file of lib/, daemon/, ctl/ or agent/ in no module, or in two;
  - an include no design arrow allows (a file of A includes a header of B
    and B is not in A's uses);
  - a private header (NAME-int.h...) included outside its module;
  - a never broken: A reaches B through any chain of includes;
  - an include cycle among daemon/'s modules;
  - docs/ARCHITECTURE.md's module table naming other modules than the
    design's daemon/ modules;
  - a file of daemon/ over 700 lines, or a function there of 100 lines or
    more (from its name to its closing brace);
  - a program linked with what it must not: vmtracectl or the agent with
    libbpf or libvirt (the daemon alone loads BPF and talks to libvirtd),
    any program with libnats, libcrypto, libvirt or libxml2 (loaded with
    dlopen() when configured, lib/dlopen.h), or any program with another
    program's objects (the agent's objects live in agent-objs/, so agent/
    objects are theirs alone).

Not seen: a field of another module's struct written outside it (a struct
in a private header is what keeps that; the compiler then refuses).

Usage: tools/layering.py [--graph] [--design FILE] [--root DIR]   (--graph
prints the daemon's module arrows first; --root checks another tree, as
tests/tools/test_layering.sh does)."""
import configparser
import fnmatch
import os
import re
import subprocess
import sys
import tempfile

INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
DIRS = ("lib", "daemon", "ctl", "agent")


def includes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return INC.findall(f.read())


def sccs(nodes, edges):
    """Tarjan's strongly connected components, each a sorted list."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def link_line(prog, objdir):
    """The command make would run to link prog, as text."""
    out = subprocess.run(["make", "--no-print-directory", "-n", "-B", "O=" + objdir,
                          objdir + "/" + prog], capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if re.search(r"-o\s+" + re.escape(objdir + "/" + prog) + r"(\s|$)", line):
            return line
    return None


def load_design(path):
    """The design file: {name: {group, files, private, uses}}, everyone's
    modules, the documented group, the nevers [(a, b, why)]."""
    cp = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    cp.optionxform = str
    with open(path, encoding="utf-8") as f:
        cp.read_file(f)
    mods = {}
    for sec in cp.sections():
        if sec.startswith("module "):
            m = cp[sec]
            mods[sec[7:]] = {"group": m.get("group", sec[7:]),
                             "owns": m.get("owns", "").split(),
                             "files": m.get("files", "").split(),
                             "private": m.get("private", "").split(),
                             "uses": set(m.get("uses", "").split())}
    d = cp["design"] if cp.has_section("design") else {}
    nevers = []
    if cp.has_section("never"):
        for k, why in cp["never"].items():
            a, _, b = k.partition("->")
            nevers.append((a.strip(), b.strip(), why))
    return mods, set(d.get("everyone_uses", "").split()), d.get("documented", "daemon"), nevers


def owners(mods, path, key="files"):
    return [n for n, m in mods.items() if any(fnmatch.fnmatchcase(path, g) for g in m[key])]


def target(d, inc):
    """The file #include "inc" in folder d finds (d first, then -Ilib), or
    None for what is not one of ours."""
    for p in (os.path.normpath(os.path.join(d, inc)), os.path.join("lib", inc)):
        if os.path.exists(p) and p.split(os.sep)[0] in DIRS:
            return p
    return None


def path_between(edges, starts, ends):
    """A chain of modules from one of starts to one of ends, or None."""
    seen, todo = set(starts), [[a] for a in sorted(starts)]
    while todo:
        chain = todo.pop(0)
        for w in sorted(edges.get(chain[-1], ())):
            if w in ends:
                return chain + [w]
            if w not in seen:
                seen.add(w)
                todo.append(chain + [w])
    return None


def documented_modules(path):
    """The modules docs/ARCHITECTURE.md's table names: the backquoted names
    of each row's first cell, its parenthesised file lists left out."""
    names, on = set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("## "):
                on = line.startswith("## The daemon's modules")
            if on and line.startswith("| `"):
                cell = re.sub(r"\([^)]*\)", "", line.split("|")[1])
                names.update(re.findall(r"`([^`]+)`", cell))
    return names


ASSIGN = r"(?:=(?!=)|\+=|-=|\*=|/=|%=|\|=|&=|\^=|<<=|>>=|\+\+|--)"


def field_writes(path, struct):
    """(line, variable, field) of each write to a field of struct through a
    variable this file declares of it (struct S *v, struct S v): v->f = ...,
    v->f.g += ..., v->f[i]++, ++v->f. A heuristic, by regular expressions:
    it misses writes through an expression (a->b->f, a cast, a macro, a
    variable of another name), &v->f handed to a function, and what a
    function of the owner writes when handed v; it does not tell apart two
    variables of one name in two functions of a file."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = re.sub(r"/\*.*?\*/|//[^\n]*", lambda m: re.sub(r"[^\n]", " ", m.group(0)),
                      f.read(), flags=re.S)
    names = set(re.findall(r"\bstruct\s+" + struct + r"\s*(?:\*\s*(?:const\s+)?)*(\w+)\s*[,;=)\[]",
                           text))
    out = []
    for v in sorted(names):
        lhs = r"\b" + v + r"\s*(?:->|\.)\s*(\w+)(?:\s*(?:->|\.)\s*\w+|\s*\[[^\]\n]*\])*\s*"
        for m in re.finditer(lhs + ASSIGN, text):
            out.append((text.count("\n", 0, m.start()) + 1, v, m.group(1)))
        for m in re.finditer(r"(?:\+\+|--)\s*" + lhs, text):
            out.append((text.count("\n", 0, m.start()) + 1, v, m.group(1)))
    return out


def check_design(design, problems, graph):
    mods, everyone, documented, nevers = load_design(design)
    for n, m in mods.items():
        for u in m["uses"] | everyone:
            if u not in mods:
                problems.append(f"{design}: module {n} uses {u}, which is no module")

    files, edges = [], {}
    for d in DIRS:
        files += [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith((".c", ".h"))]
    for p in files:
        own = owners(mods, p)
        if len(own) != 1:
            problems.append(f"{p} is in {'no module' if not own else 'modules ' + ', '.join(own)} "
                            f"({design})")
            continue
        a = own[0]
        for inc in includes(p):
            t = target(os.path.dirname(p), inc)
            b = (owners(mods, t) or [None])[0] if t else None
            if b is None or b == a:
                continue
            edges.setdefault(a, set()).add(b)
            if b not in mods[a]["uses"] | everyone:
                problems.append(f"{p} includes {inc}: {a} may not use {b} ({design})")
            if owners(mods, t, "private"):
                problems.append(f"{p} includes {inc}: a private header of {b}")

    # the structs a module owns: their fields written by its files alone
    for n, m in mods.items():
        for st in m["owns"]:
            for p in files:
                if owners(mods, p) == [n] or not p.endswith(".c"):
                    continue
                for line, v, fld in field_writes(p, st):
                    problems.append(f"{p}:{line}: {v}->{fld} written: struct {st} is {n}'s "
                                    f"({design})")

    group = {}
    for n, m in mods.items():
        group.setdefault(m["group"], set()).add(n)
    for a, b, why in nevers:
        starts, ends = group.get(a, {a} & set(mods)), group.get(b, {b} & set(mods))
        if not starts or not ends:
            problems.append(f"{design}: never {a} -> {b} names no module")
            continue
        chain = path_between(edges, starts, ends)
        if chain:
            problems.append(f"never {a} -> {b} ({why}), but {' -> '.join(chain)}")

    daemon = group.get(documented, set())
    if graph:
        for a in sorted(a for a in daemon if edges.get(a, set()) & daemon):
            print(f"{a} -> {' '.join(sorted(edges[a] & daemon))}")
    for comp in sccs(daemon, {a: edges.get(a, set()) & daemon for a in daemon}):
        if len(comp) > 1:
            problems.append(f"{documented}/ include cycle among " + ", ".join(comp))
    doc = documented_modules("docs/ARCHITECTURE.md")
    for n in sorted(daemon - doc):
        problems.append(f"docs/ARCHITECTURE.md: module {n} ({design}) is not in its table")
    for n in sorted(doc - daemon):
        problems.append(f"docs/ARCHITECTURE.md: its table names {n}, which is no module of {design}")


FILE_MAX, FUNC_MAX = 700, 100
FUNC_NAME = re.compile(r"(\w+)\s*\(")


def functions(path):
    """(first line, lines, name) of each function: the column-0 brace
    block after a column-0 declaration (the kernel/systemd layout the
    sources keep, which clang-format would keep too)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    out, start = [], None
    for i, line in enumerate(lines):
        if start is None and line == "{":
            j = i - 1
            while j > 0 and not re.match(r"[A-Za-z_]", lines[j]):
                j -= 1
            m = FUNC_NAME.search(lines[j])
            start, name = j, m.group(1) if m else "?"
        elif start is not None and line == "}":
            out.append((start + 1, i - start + 1, name))
            start = None
    return out


def check_sizes(problems):
    """daemon/: no file past FILE_MAX lines, no function of FUNC_MAX or more."""
    for f in sorted(os.listdir("daemon")):
        if not f.endswith(".c"):
            continue
        p = os.path.join("daemon", f)
        with open(p, encoding="utf-8", errors="replace") as fh:
            n = fh.read().count("\n")
        if n > FILE_MAX:
            problems.append(f"{p} has {n} lines (at most {FILE_MAX}: split it along a seam)")
        for line, length, name in functions(p):
            if length >= FUNC_MAX:
                problems.append(f"{p}:{line}: {name}() is {length} lines "
                                f"(under {FUNC_MAX}: a helper per step)")


def check_links(problems):
    """Libraries and objects each program may not take in."""
    optional = ("-lnats", "-lcrypto", "-lvirt", "-lxml2")
    banned = {"vmtraced": (optional, ("ctl", "agent")),
              "vmtracectl": (("-lbpf",) + optional, ("daemon", "agent")),
              "vmtrace-agent": (("-lbpf",) + optional, ("daemon", "ctl"))}
    with tempfile.TemporaryDirectory() as tmp:
        for prog, (libs, dirs) in banned.items():
            line = link_line(prog, tmp)
            if line is None:
                problems.append(f"cannot find how make links {prog}")
                continue
            words = line.split()
            for b in libs:
                if b in words:
                    problems.append(f"{prog} is linked with {b}")
            for w in words:
                m = re.search(r"/(" + "|".join(dirs) + r")/[^/]+\.o$", w)
                if m:
                    problems.append(f"{prog} is linked with {m.group(1)}/ object {os.path.basename(w)}")


def main(argv):
    problems = []
    design = argv[argv.index("--design") + 1] if "--design" in argv else "docs/design.ini"
    check_design(design, problems, "--graph" in argv)
    check_sizes(problems)
    if "--no-link" not in argv:
        check_links(problems)
    for p in problems:
        print("layering:", p)
    if not problems:
        print(f"layering: ok ({design}: every file in one module, every include allowed, "
              "no never broken, no cycle, no file or function too long; no forbidden link)")
    return 1 if problems else 0


if __name__ == "__main__":
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    if "--root" in sys.argv:
        root = sys.argv[sys.argv.index("--root") + 1]
    os.chdir(root)
    sys.exit(main(sys.argv))
