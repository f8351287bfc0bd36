#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Keeps vmtraced's shape: reads the #include graph of the sources and the
link lines make would run, and fails (exit 1, one line a finding) on

  - an include cycle among daemon/'s modules (NAME.c, NAME.h and
    NAME-PART.c/.h are one module: guest-msg.c and guest-int.h are the
    guest's; an arrow A -> B when a file of A includes a header of B);
  - a forbidden edge: lib/ including a header of daemon/, ctl/ or agent/;
    ctl/ or agent/ including daemon/; daemon/ or agent/ including ctl/;
  - a program linked with what it must not: vmtracectl or the agent with
    libbpf or libvirt (the daemon alone loads BPF and talks to libvirtd), or
    any program with another program's objects (the agent's
    objects live in agent-objs/, so agent/ objects are theirs alone).

Usage: tools/layering.py [--graph]   (from the source tree; --graph prints
the daemon's module arrows first)."""
import os
import re
import subprocess
import sys
import tempfile

INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
DIRS = ("lib", "daemon", "ctl", "agent")


def resolve(d, inc):
    """The folder a #include "inc" in folder d finds, as the compiler looks:
    d itself first, then -Ilib; None for what is not one of ours."""
    path = os.path.normpath(os.path.join(d, inc))
    if os.path.exists(path):
        return path.split(os.sep)[0]
    if os.path.exists(os.path.join("lib", inc)):
        return "lib"
    return None


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


def main():
    problems = []

    # forbidden include edges
    rules = {"lib": ("daemon", "ctl", "agent"), "ctl": ("daemon", "agent"),
             "agent": ("daemon", "ctl"), "daemon": ("ctl", "agent")}
    for d in DIRS:
        for f in sorted(os.listdir(d)):
            if not f.endswith((".c", ".h")):
                continue
            for inc in includes(os.path.join(d, f)):
                to = resolve(d, inc)
                if to in rules[d]:
                    problems.append(f"{d}/{f} includes {to}/{inc}: {d}/ may not include {to}/")

    # cycles among daemon/'s modules
    def module(name):
        return name[:-2].split("-")[0]

    mods = {module(f) for f in os.listdir("daemon") if f.endswith((".c", ".h"))}
    edges = {}
    for f in os.listdir("daemon"):
        if not f.endswith((".c", ".h")):
            continue
        a = module(f)
        for inc in includes(os.path.join("daemon", f)):
            b = module(os.path.basename(inc))
            if inc.endswith(".h") and resolve("daemon", inc) == "daemon" and b != a \
                    and b in mods:
                edges.setdefault(a, set()).add(b)
    if "--graph" in sys.argv:
        for a in sorted(edges):
            print(f"{a} -> {' '.join(sorted(edges[a]))}")
    for comp in sccs(mods, edges):
        if len(comp) > 1:
            problems.append("daemon/ include cycle among " + ", ".join(comp))

    # link lines: libraries and objects each program may not take in
    banned = {"vmtraced": ((), ("ctl", "agent")),
              "vmtracectl": (("-lbpf", "-lvirt"), ("daemon", "agent")),
              "vmtrace-agent": (("-lbpf", "-lvirt"), ("daemon", "ctl"))}
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
                m = re.search(r"/(" + "|".join(dirs) + r")/[^/]+\.o$", w) if dirs else None
                if m:
                    problems.append(f"{prog} is linked with {m.group(1)}/ object {os.path.basename(w)}")

    for p in problems:
        print("layering:", p)
    if not problems:
        print("layering: ok (no daemon/ include cycle, no forbidden include or link)")
    return 1 if problems else 0


if __name__ == "__main__":
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    sys.exit(main())
