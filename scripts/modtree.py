"""The module tree of a Rust crate and the references between its modules,
for scripts/check-modules.py (whose doc says what is read and how a reference
is resolved). Standard library only.

- `blank`: the source with comments and string/char literals blanked, so only
  code is read.
- `Crate`: the modules from `lib.rs` down (file and inline modules, test code
  left out), the names each module defines and binds by `use`, the paths each
  one writes, and `Crate.edges()`: every reference resolved to the module that
  defines its item.
"""

import os
import re

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
    body = attr.replace(" ", "")
    if not body.startswith("[cfg("):  # `cfg_attr(test, …)` keeps the item
        return False
    return re.search(r"\btest\b", body) is not None and "not(test)" not in body


class Module:
    """One module: where its text is, its children, and what it defines, binds and writes."""

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


class Crate:
    """A crate's modules by path (a tuple of names, () for lib.rs)."""

    def __init__(self, name, root_file):
        self.name = name
        self.modules = {}
        self.root = self.load((), root_file, is_root=True)

    def load(self, path, file, is_root=False):
        """Reads module `path` from `file`; `is_root`: its `mod x;` files are beside it (lib.rs, mod.rs)."""
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
                        # Relative to the file's folder (no #[path] in an inline module today).
                        child = self.load(child_path, os.path.join(os.path.dirname(m.file), explicit[0]), True)
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
