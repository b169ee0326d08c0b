#!/usr/bin/env python3
"""Import circles between the modules of lockscope's crates (issue 25).

Usage: scripts/check-modules.py [--parents[=CRATE::MOD,...]] [model] [app] [server]
           (crates default: all three)
       scripts/check-modules.py --self-test

For each crate it builds the module tree from the `mod` declarations of
`<crate>/src/lib.rs` (files `x.rs` + `x/...` and `x/mod.rs`, inline `mod x { }`
blocks; `#[path = "..."]` is honoured), skipping test code: modules named `tests`
or `*_tests` and every item under a `#[cfg(test)]`-like attribute. Comments and
string literals are blanked first, so doc links (``[`crate::table`]``) are not
imports. It then collects every reference to a module of the crate:
`crate::a::b` and `super::`/`self::` paths, in `use` trees (grouped
`use crate::{a, b::c}` included) and inline (`crate::table::States` inside a
`view!`), and `child::x` paths that start with one of the module's own children.
A reference is resolved to the module that DEFINES the item: a name bound by a
`use` (a `pub use` re-export, or a private import that `super::` reaches) is
followed to its source, through globs too.

Rule 1 always runs and fails the run (exit 1) when broken:

1. No import circle among the top-level modules of a crate, nor among siblings
   at any level; a child's whole subtree counts as that child (a reference from
   `a::x::y` to `b::z` is the edge `a -> b` at the top level, nothing inside `a`).
   Each circle is printed as `crate: a -> b -> c -> a` (a closed walk through
   every module of one strongly connected component) with one example
   reference (file:line) per edge.

Rule 2 runs for the parents `--parents=server::web,model::fleet` names (all of
them with a bare `--parents`) and then fails the run too:

2. A parent's own file is not imported by a child the parent imports (the
   "never web/mod.rs" rule): if `p.rs` (or `p/mod.rs`) uses anything of its
   child `p::c` (a `pub use c::X` re-export counts: the file needs the child to
   compile), then nothing in `p::c` may use an item defined in `p.rs` itself.
   Shared items go in a leaf sibling (`p/state.rs`, `p/error.rs`) instead.

   Why not for every parent: on the day it was written a bare `--parents`
   reported 2 children in model (`history/gap.rs` and `history/query.rs` using
   `history.rs`'s `Kind`) and 21 in server (`hub/task.rs`
   using `hub.rs`'s types, `audit/record.rs` using `audit/mod.rs`'s, ...).
   Almost all are Rust's ordinary "the parent defines the type, its children
   add the parts" shape: the two files are one unit a reader opens together,
   and no build or test order depends on them being apart. Failing on all of
   them would force two dozen moves that buy nothing a newcomer notices, and
   would drown the one place the rule matters: a hub module (`web/mod.rs`,
   which builds the router from every child) that children also import, so
   that every page depends on every other page through it. So it is a tool
   for the parents that are such hubs, named on the command line (the test
   command names them as they come), and a bare `--parents` is an audit.

The crate root (`lib.rs`) is a module like any other: a child that uses an item
lib.rs defines (not merely re-exports) while lib.rs uses that child is rule 2.
References the checker cannot resolve (macro-generated items, names from outside
the crate) count for the module the path stops at, or not at all when the path
leaves the crate. Binaries (`main.rs`, `src/bin/`) are other crates of their own
and import the library by its name, so they cannot close a circle in it.
"""

import os
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in scripts/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from modtree import Crate  # noqa: E402 (beside this script)

def strongly_connected(nodes, adj):
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(adj.get(v, ())):
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
            comps.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return comps


def closed_walk(comp, adj):
    """A walk from comp[0] through every node of a strongly connected component and back."""
    members = set(comp)

    def path(a, b):
        prev, frontier = {a: None}, [a]
        while frontier:
            nxt = []
            for v in frontier:
                for w in sorted(adj.get(v, ())):
                    if w in members and w not in prev:
                        prev[w] = v
                        nxt.append(w)
            frontier = nxt
            if b in prev:
                break
        if a == b:
            # the shortest way out and back
            best = None
            for w in sorted(adj.get(a, ())):
                if w in members and w != a:
                    back = path(w, a)
                    if best is None or len(back) + 1 < len(best):
                        best = [a] + back
            return best
        out = [b]
        while prev[out[-1]] is not None:
            out.append(prev[out[-1]])
        return out[::-1]

    walk = [comp[0]]
    for v in comp[1:]:
        if v not in walk:
            walk += path(walk[-1], v)[1:]
    walk += path(walk[-1], comp[0])[1:]
    return walk


def check(crate, parents=None):
    """The findings for `crate`: its circles, and rule 2 for the parents named
    in `parents` (a set of module paths; None: every parent; empty: none)."""
    crate.collect_refs()
    edges = crate.edges()
    findings = []
    # Rule 1: sibling circles at every level.
    levels = {}
    for src, dst, where in edges:
        d = 0
        while d < len(src) and d < len(dst) and src[d] == dst[d]:
            d += 1
        if d < len(src) and d < len(dst):
            adj = levels.setdefault(src[:d], {})
            adj.setdefault(src[d], {}).setdefault(dst[d], where)
    for parent in sorted(levels):
        adj = levels[parent]
        nodes = set(adj) | {w for v in adj for w in adj[v]}
        for comp in strongly_connected(nodes, {v: set(adj[v]) for v in adj}):
            if len(comp) < 2:
                continue
            walk = closed_walk(comp, {v: set(adj[v]) for v in adj})
            prefix = "".join(p + "::" for p in parent)
            lines = [f"{crate.name}: circle of {len(comp)}: " + " -> ".join(prefix + w for w in walk)]
            for a, b in zip(walk, walk[1:]):
                lines.append(f"    {prefix}{a} -> {prefix}{b}: {adj[a][b]}")
            findings.append("\n".join(lines))
    # Rule 2: a child uses its parent's own file while the parent's file uses the child.
    for m in crate.modules.values():
        if parents is not None and m.path not in parents:
            continue
        for name, child in sorted(m.children.items()):
            down = next((w for s, t, w in edges if s == m.path and t[: len(child.path)] == child.path), None)
            up = next((w for s, t, w in edges if s[: len(child.path)] == child.path and t == m.path), None)
            if down and up:
                parent = "::".join(m.path) or "crate root"
                findings.append(
                    f"{crate.name}: {'::'.join(child.path)} uses its parent's own file ({parent}), which uses it\n"
                    f"    {'::'.join(child.path)} -> {parent}: {up}\n"
                    f"    {parent} -> {'::'.join(child.path)}: {down}"
                )
    return findings


def run(crates, root, parents=frozenset()):
    """Checks `crates` under `root`; `parents`: `crate::module` names for rule 2
    (None: all). 1 when anything was found."""
    failed = False
    for name in crates:
        lib = os.path.join(root, name, "src", "lib.rs")
        crate = Crate(name, lib)
        mine = None
        if parents is not None:
            mine = {tuple(p.split("::")[1:]) for p in parents if p.split("::")[0] == name}
            for p in mine - set(crate.modules):
                raise SystemExit(f"--parents: {name} has no module {'::'.join(p)}")
        findings = check(crate, mine)
        for f in findings:
            print(f)
        if not findings:
            print(f"{name}: no import circle")
        failed |= bool(findings)
    return 1 if failed else 0


def self_test():
    def tree(files):
        d = tempfile.mkdtemp(prefix="check-modules-")
        for path, body in files.items():
            full = os.path.join(d, "t", "src", path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write(body)
        return d

    # docs/architecture.md, "Import rules": "No two modules of a crate import each other, directly
    # or round a circle: among a crate's top-level modules, and among the children of any module
    # (a child's whole subtree counts as that child)."
    cyclic = tree(
        {
            "lib.rs": "//! [`crate::b`]\npub mod a;\npub mod b;\npub mod c;\npub mod p;\npub use b::Thing;\n",
            "a.rs": "use crate::{c::Other, Thing};\npub fn f() {}\n",  # grouped; Thing re-exported from b
            "b.rs": 'pub struct Thing;\nfn g() { let _ = "crate::a::f"; crate::c::h(); }\n',
            "c.rs": "pub fn h() {}\npub struct Other;\n#[cfg(test)]\nmod tests { use crate::a::f; }\n",
            "p/mod.rs": "mod x;\nmod y;\npub struct Shared;\npub fn app() { x::run(); }\n",
            "p/x.rs": "use super::y::Y;\nuse super::Shared;\npub fn run() {}\n",
            "p/y.rs": "pub struct Y;\npub fn z() { super::x::run() }\n",
        }
    )
    out = check(Crate("t", os.path.join(cyclic, "t", "src", "lib.rs")))
    text = "\n".join(out)
    assert any(o.startswith("t: circle of 2: p::x -> p::y -> p::x") for o in out), text
    assert "t: p::x uses its parent's own file (p), which uses it" in text, text
    # a -> b (through lib.rs's re-export) and b -> c, c -> a only in a test module and a string: no circle.
    assert not any(o.startswith("t: circle of") and "p::" not in o for o in out), text
    assert len(out) == 2, text
    # Rule 2 only for the parents named: none named, only the circle.
    out = check(Crate("t", os.path.join(cyclic, "t", "src", "lib.rs")), parents=set())
    assert len(out) == 1 and "own file" not in out[0], "\n".join(out)

    acyclic = tree(
        {
            "lib.rs": "pub mod a;\npub mod b;\npub mod c;\npub use c::Leaf;\n",
            "a.rs": "use crate::{b::{self, B}, Leaf};\nmod inner { pub fn i() { crate::b::B; } }\n",
            "b.rs": "pub struct B;\npub fn g() -> crate::Leaf { crate::c::Leaf }\n",
            "c.rs": "pub struct Leaf;\nconst S: &str = r#\"crate::a::x\"#;\nconst C: char = '\"';\n// crate::a::x\n",
        }
    )
    out = check(Crate("t", os.path.join(acyclic, "t", "src", "lib.rs")))
    assert out == [], "\n".join(out)

    inline = tree({"lib.rs": "pub mod a { pub fn f() { crate::b::g() } }\npub mod b { pub fn g() { super::a::f() } }\n"})
    out = check(Crate("t", os.path.join(inline, "t", "src", "lib.rs")))
    assert len(out) == 1 and out[0].startswith("t: circle of 2: a -> b -> a"), "\n".join(out)
    print("self-test: ok")
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if args == ["--self-test"]:
        sys.exit(self_test())
    parents = frozenset()
    for a in [a for a in args if a.startswith("--parents")]:
        args.remove(a)
        parents = None if a == "--parents" else frozenset(a.split("=", 1)[1].split(","))
    unknown = [a for a in args if a not in ("model", "app", "server")]
    if unknown:
        raise SystemExit(f"unknown crate or option: {' '.join(unknown)} (see the usage in this script's doc)")
    repo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    os.chdir(repo)
    sys.exit(run(args or ["model", "app", "server"], ".", parents))
