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
import re
import sys
import tempfile

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
ITEM_DEF = re.compile(
    r"\b(?:fn|struct|enum|trait|type|const|static|union|mod)\s+(?:r#)?(" + IDENT + r")|\bmacro_rules!\s*(" + IDENT + ")"
)


def blank(text):
    """The source with comments and string/char literals turned into spaces
    (newlines kept, so offsets and line numbers stay)."""
    out = list(text)
    i, n = 0, len(text)

    def wipe(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            wipe(i, j)
            i = j
        elif c in "rb" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.compile(r'(?:br|r|b)(#*)"').match(text, i)
            if m and (m.group(0)[0] == "r" or m.group(0).startswith("br")):
                end = text.find('"' + m.group(1), m.end())
                end = n if end < 0 else end + 1 + len(m.group(1))
                wipe(i, end)
                i = end
            elif text.startswith('b"', i) or text.startswith("b'", i):
                i += 1  # the literal itself is handled at the quote
            else:
                i += 1
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            wipe(i, j + 1)
            i = j + 1
        elif c == "'":
            m = re.compile(r"'(?:\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'").match(text, i)
            if m:
                wipe(i, m.end())
                i = m.end()
            else:
                i += 1  # a lifetime
        else:
            i += 1
    return "".join(out)


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def matching_brace(text, open_pos):
    depth = 0
    for k in range(open_pos, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(text) - 1


def item_end(text, pos):
    """End of the item starting at pos: its `;` or its closing brace, whichever comes first at depth 0."""
    depth = 0
    for k in range(pos, len(text)):
        ch = text[k]
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == ";" and depth == 0:
            return k + 1
        elif ch == "{" and depth == 0:
            return matching_brace(text, k) + 1
    return len(text)


ATTR = re.compile(r"#!?\[")


def attributes_then_item(text, pos):
    """Attributes starting at pos: (list of their texts, position after them)."""
    attrs = []
    while True:
        m = re.compile(r"\s*#\[").match(text, pos)
        if not m:
            return attrs, pos
        depth, k = 0, m.end() - 1
        while k < len(text):
            if text[k] == "[":
                depth += 1
            elif text[k] == "]":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        attrs.append(text[m.end() - 1 : k + 1])
        pos = k + 1


def is_test_cfg(attr):
    if not attr.startswith("[cfg"):
        return False
    body = attr.replace(" ", "")
    return re.search(r"\btest\b", body) is not None and "not(test)" not in body


class Module:
    def __init__(self, path, file, raw, text, start, end):
        self.path = path  # tuple of names, () for the crate root
        self.file = file
        self.raw = raw
        self.text = text  # the blanked file text
        self.start, self.end = start, end  # this module's region of the file
        self.children = {}
        self.holes = []  # (start, end) regions that are not this module's: child inline modules, test items
        self.bindings = {}  # name -> (resolvable path, line) from module-level `use`
        self.globs = []  # paths of module-level `use x::*`
        self.defs = set()
        self.refs = []  # (path tuple as written, line)

    def own(self, pos):
        return self.start <= pos < self.end and not any(a <= pos < b for a, b in self.holes)


class Crate:
    def __init__(self, name, root_file):
        self.name = name
        self.modules = {}
        self.root = self.load((), root_file, is_root=True)

    def load(self, path, file, is_root=False):
        raw = open(file, encoding="utf-8").read()
        text = blank(raw)
        return self.build(path, file, raw, text, 0, len(text), is_root)

    def build(self, path, file, raw, text, start, end, dir_owner):
        m = Module(path, file, raw, text, start, end)
        self.modules[path] = m
        # Where `mod x;` files live: next to lib.rs/mod.rs, or in the folder named after this file.
        if dir_owner:
            base = os.path.dirname(file)
        else:
            base = os.path.join(os.path.dirname(file), os.path.splitext(os.path.basename(file))[0])
        self.scan_items(m, base)
        return m

    def scan_items(self, m, base):
        text, raw = m.text, m.raw
        k = m.start + (1 if m.start else 0)  # inside an inline module's brace
        # Walk the region; at depth 0 of the region look at each item's attributes.
        item_start = re.compile(r"[^\s]")
        end_of_region = m.end - (1 if m.start else 0)
        while k < end_of_region:
            mm = item_start.search(text, k, end_of_region)
            if not mm:
                break
            k = mm.start()
            ch = text[k]
            if ch == "}":
                k += 1
                continue
            if re.compile(r"#!\[").match(text, k):
                k = text.find("]", k) + 1
                continue
            attrs, after = attributes_then_item(text, k)
            raw_attrs = attributes_then_item(raw, k)[0] if attrs else []
            end = item_end(text, after)
            end = min(end, end_of_region)
            mod_m = re.compile(r"\s*(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*([;{])").match(text, after)
            test_item = any(is_test_cfg(a) for a in attrs)
            if mod_m and (mod_m.group(1) == "tests" or mod_m.group(1).endswith("_tests")):
                test_item = True
            if test_item:
                m.holes.append((k, end))
            elif mod_m:
                name = mod_m.group(1)
                child_path = m.path + (name,)
                m.defs.add(name)
                if mod_m.group(2) == "{":
                    open_pos = mod_m.end() - 1
                    close = matching_brace(text, open_pos)
                    m.holes.append((open_pos, close + 1))
                    child = self.build_inline(child_path, m, open_pos, close + 1, os.path.join(base, name))
                else:
                    explicit = [re.search(r'path\s*=\s*"([^"]*)"', a) for a in raw_attrs]
                    explicit = [e.group(1) for e in explicit if e]
                    if explicit:
                        f = os.path.join(os.path.dirname(m.file) if not m.path or m.file.endswith("mod.rs") else base, explicit[0])
                        child = self.load(child_path, f, is_root=True)
                    elif os.path.exists(os.path.join(base, name + ".rs")):
                        child = self.load(child_path, os.path.join(base, name + ".rs"))
                    elif os.path.exists(os.path.join(base, name, "mod.rs")):
                        child = self.load(child_path, os.path.join(base, name, "mod.rs"), is_root=True)
                    else:
                        raise SystemExit(f"{m.file}:{line_of(text, k)}: no file for `mod {name};`")
                m.children[name] = child
            else:
                self.scan_item(m, after, end)
            k = end

    def build_inline(self, path, parent, start, end, base):
        m = Module(path, parent.file, parent.raw, parent.text, start, end)
        self.modules[path] = m
        self.scan_items(m, base)
        return m

    def scan_item(self, m, start, end):
        text = m.text
        body = text[start:end]
        stripped = re.sub(r"^\s*(?:pub(?:\s*\([^)]*\))?\s+)?(?:(?:async|unsafe|extern|default|const(?=\s+fn))\s+)*", "", body)
        d = ITEM_DEF.match(stripped)
        if d:
            m.defs.add(d.group(1) or d.group(2))
        use_m = re.compile(r"\s*(?:pub(?:\s*\([^)]*\))?\s+)?use\s").match(text, start)
        if use_m:
            for path, alias, line in self.use_paths(text, use_m.end(), end):
                if path[-1] == "*":
                    m.globs.append(path[:-1])
                elif alias != "_":
                    m.bindings[alias] = (path, line)

    def use_paths(self, text, start, end):
        """The paths of a `use` tree between start and its `;`: (segments, bound name, line)."""
        toks = [(t.group(0), t.start()) for t in re.finditer(IDENT + r"|::|[{},*;]", text[start:end])]
        toks = [(t, p + start) for t, p in toks]
        out = []

        def tree(i, prefix):
            segs = list(prefix)
            while i < len(toks):
                t, p = toks[i]
                if t == "{":
                    i += 1
                    while i < len(toks) and toks[i][0] != "}":
                        i = tree(i, segs)
                        if i < len(toks) and toks[i][0] == ",":
                            i += 1
                    return i + 1
                if t == "*":
                    out.append((tuple(segs) + ("*",), "*", line_of(text, p)))
                    return i + 1
                if t in (",", "}", ";"):
                    break
                if t == "::":
                    i += 1
                    continue
                if t == "as":
                    alias = toks[i + 1][0]
                    out.append((tuple(segs), alias, line_of(text, p)))
                    return i + 2
                segs.append(t)
                last = (t, p)
                i += 1
            if len(segs) > len(prefix):
                name = segs[-1]
                if name == "self":
                    segs = segs[:-1]
                    name = segs[-1] if segs else "self"
                out.append((tuple(segs), name, line_of(text, last[1])))
            return i

        i = 0
        while i < len(toks) and toks[i][0] != ";":
            i = tree(i, [])
            if i < len(toks) and toks[i][0] == ",":
                i += 1
        return out

    # -- references ---------------------------------------------------------------------------

    def owner_of(self, pos, m):
        for c in m.children.values():
            if c.file == m.file and c.start <= pos < c.end:
                return self.owner_of(pos, c)
        return m

    def collect_refs(self):
        by_file = {}
        for m in self.modules.values():
            by_file.setdefault(m.file, []).append(m)
        for file, mods in by_file.items():
            top = min(mods, key=lambda x: len(x.path))
            text = top.text
            test_holes = [h for mm in mods for h in mm.holes if not any(c.start == h[0] for c in mm.children.values())]
            use_spans = []
            for u in re.finditer(r"(?<![\w$])use\s", text):
                if any(a <= u.start() < b for a, b in test_holes):
                    continue
                end = item_end(text, u.start())
                use_spans.append((u.start(), end))
                src = self.owner_of(u.start(), top)
                for path, _, line in self.use_paths(text, u.end(), end):
                    if path and path[-1] == "*":
                        path = path[:-1]
                    src.refs.append((path, line))
            for p in re.finditer(r"(?<![\w$:])(" + IDENT + r")(?:\s*::\s*(?:" + IDENT + r"))+", text):
                pos = p.start()
                if any(a <= pos < b for a, b in test_holes + use_spans):
                    continue
                if re.search(r"\bin\s*$", text[max(0, pos - 4) : pos]):
                    continue  # pub(in crate::x)
                src = self.owner_of(pos, top)
                segs = tuple(re.split(r"\s*::\s*", p.group(0)))
                if segs[0] in ("crate", "super", "self") or segs[0] in src.children:
                    src.refs.append((segs, line_of(text, pos)))

    def absolute(self, frm, path):
        """A path as written in module `frm`, made absolute (a tuple of names below the root), or None."""
        if not path:
            return None
        first = path[0]
        if first == "crate":
            return tuple(path[1:])
        if first == "self":
            return frm + tuple(path[1:])
        if first == "super":
            base, rest = frm, list(path)
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
            return base + tuple(rest)
        m = self.modules.get(frm)
        if m and first in m.children:
            return frm + tuple(path)
        if m and first in m.bindings and first not in m.defs:
            bound, _ = m.bindings[first]
            b = self.absolute(frm, bound)
            return None if b is None else b + tuple(path[1:])
        return None

    def resolve(self, path, seen=None):
        """Where an absolute path leads: the module that defines its item (or the module itself)."""
        seen = seen or set()
        cur = ()
        rest = list(path)
        while rest:
            m = self.modules[cur]
            name = rest[0]
            if name in m.children:
                cur, rest = m.children[name].path, rest[1:]
                continue
            if name in m.defs:
                return cur
            key = (cur, name)
            if key in seen:
                return cur
            seen.add(key)
            if name in m.bindings:
                target = self.absolute(cur, m.bindings[name][0])
                return None if target is None else self.resolve(target + tuple(rest[1:]), seen)
            for g in m.globs:
                base = self.absolute(cur, g)
                if base is None or base not in self.modules:
                    continue
                gm = self.modules[base]
                if name in gm.defs or name in gm.children or name in gm.bindings:
                    return self.resolve(base + tuple(rest), seen)
            return cur
        return cur

    def edges(self):
        """(source module, target module, file:line) for every reference inside the crate."""
        out = []
        for m in self.modules.values():
            for path, line in m.refs:
                a = self.absolute(m.path, path)
                if a is None:
                    continue
                t = self.resolve(a)
                if t is None:
                    continue
                out.append((m.path, t, f"{os.path.relpath(m.file)}:{line}"))
        return out


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
