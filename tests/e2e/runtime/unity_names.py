#!/usr/bin/env python3
"""Names that would collide in a unity batch, found on the sources.

The LibTorch layers are compiled in unity batches (cmake/HpctrainTargets.cmake): several .cpp files
of one layer become one translation unit, so their anonymous namespaces merge and a `static` or
anonymous-namespace name defined in two files of a layer is a redefinition (or, for functions of
different signatures, a silent overload). Which files share a batch depends on the file names, so a
name defined twice anywhere in a layer is an error waiting for a file to be added or renamed.

Usage: unity_names.py --target NAME FILE... [--target NAME FILE...] (each target compiled in
unity batches, with its .cpp files). Prints each name with internal linkage (at namespace scope:
in an anonymous namespace or `static`) or macro defined by more than one file of a layer, and exits
1 if there is one. Alias declarations that read the same in every file (`using Clock =
std::chrono::steady_clock;`, `using runtime::seconds_since;`, `namespace fs = std::filesystem;`)
redeclare the same thing and are allowed.
"""
import collections
import os
import re
import sys

IDENT = r"[A-Za-z_]\w*"


def strip(text):
    """The source without comments, string and character literals (kept as "" / ''), with macro
    definitions and other preprocessor lines removed (returned apart)."""
    out, macros, i, n = [], [], 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#":
            j = i
            while True:  # the directive with its continuation lines
                k = text.find("\n", j)
                if k < 0:
                    k = n
                if k > 0 and text[k - 1] == "\\":
                    j = k + 1
                    continue
                break
            m = re.match(r"#\s*define\s+(" + IDENT + ")", text[i:k])
            if m:
                macros.append(m.group(1))
            m = re.match(r"#\s*undef\s+(" + IDENT + ")", text[i:k])
            if m and m.group(1) in macros:
                macros.remove(m.group(1))  # defined and undefined in the file: leaks nothing
            out.append("\n")
            i = k + 1
            continue
        if text.startswith("//", i):
            k = text.find("\n", i)
            i = n if k < 0 else k
            continue
        if text.startswith("/*", i):
            k = text.find("*/", i + 2)
            i = n if k < 0 else k + 2
            out.append(" ")
            continue
        m = re.match(r'R"([^(\s]*)\(', text[i:i + 20])
        if m:
            end = text.find(")" + m.group(1) + '"', i)
            i = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""')
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
            at_line_start = False
            continue
        out.append(c)
        if c == "\n":
            at_line_start = True
        elif not c.isspace():
            at_line_start = False
        i += 1
    return "".join(out), macros


def declared_name(stmt):
    """The name a namespace-scope declaration introduces, or None; and whether it is an alias."""
    s = re.sub(r"\s+", " ", stmt).strip()
    s = re.sub(r"^template ?<.*?> ?(?=[A-Za-z])", "", s)
    if not s or s.startswith(("using namespace", "static_assert", "extern ", "friend ")):
        return None, False
    m = re.match(r"namespace (" + IDENT + ") ?=", s)
    if m:
        return m.group(1), True
    m = re.match(r"using (" + IDENT + ") ?=", s)
    if m:
        return m.group(1), True
    m = re.match(r"using ((?:" + IDENT + r"::)+)(" + IDENT + r")$", s)
    if m:
        return m.group(2), True
    m = re.match(r"typedef .*?(" + IDENT + r")$", s)
    if m:
        return m.group(1), True
    m = re.match(r"(?:enum (?:class |struct )?|struct |class |union )(?:\[\[.*?\]\] )?(" + IDENT + ")",
                 s)
    if m:
        return m.group(1), False
    # A function or variable: the identifier before the first '(', '=', '{', '[' or ':' at depth 0
    # (an operator's name counts as "operator").
    depth = 0
    for k, ch in enumerate(s):
        if ch in "<":
            depth += 1
        elif ch in ">" and depth > 0:
            depth -= 1
        elif depth == 0 and (ch in "(={[;" or (ch == ":" and s[k:k + 2] != "::" and
                                                s[k - 1:k + 1] != "::")):
            head = s[:k].rstrip()
            if re.search(r"\boperator\s*\S*$", head):
                return None, False
            m = re.search(r"(::\s*)?(" + IDENT + r")$", head)
            if not m or m.group(1):
                return None, False  # nothing, or a member or qualified name defined out of line
            if ch == "(" and re.fullmatch(r"[A-Z][A-Z0-9_]*", m.group(2)):
                return None, False  # a macro's invocation (TEST(...), HPCTRAIN_..._INSTANTIATE(...))
            return m.group(2), False
    m = re.search(r"(" + IDENT + r")$", s)
    return (m.group(1) if m else None), False


def file_local_names(path):
    """(name, is_alias, statement) for each namespace-scope name with internal linkage, and the
    macros the file leaves defined."""
    text, macros = strip(open(path, encoding="utf-8").read())
    found = []
    # A stack of scopes: "anon", "named", "other" (class, function, initializer...).
    stack = []
    stmt_start = 0
    i, n = 0, len(text)

    def at_namespace_scope():
        return all(kind in ("anon", "named") for kind in stack)

    def record(stmt):
        in_anon = "anon" in stack
        s = stmt.strip()
        is_static = re.match(r"(?:template ?<.*?> ?)?(?:inline )?static\b", re.sub(r"\s+", " ", s))
        s = re.sub(r"^((?:template ?<.*?> ?)?)(?:inline )?static (?:inline )?", r"\1", re.sub(r"\s+", " ", s))
        name, alias = declared_name(s)
        if name:
            found.append((name, alias, bool(in_anon or is_static), re.sub(r"\s+", " ", stmt).strip()))

    while i < n:
        c = text[i]
        if c == "{":
            head = text[stmt_start:i]
            h = re.sub(r"\s+", " ", head).strip()
            if at_namespace_scope():
                if re.fullmatch(r"(inline )?namespace", h):
                    stack.append("anon")
                elif re.fullmatch(r"(inline )?namespace " + IDENT + r"(::" + IDENT + r")*", h):
                    stack.append("named")
                elif re.fullmatch(r'extern ""', h):
                    stack.append("named")
                else:
                    record(head)
                    stack.append("other")
            else:
                stack.append("other")
            stmt_start = i + 1
        elif c == "}":
            if stack:
                stack.pop()
            stmt_start = i + 1
            if at_namespace_scope():
                # `struct X {...} x;` or `T x{...};`: the statement goes on to the ';'.
                rest = text[i + 1:]
                m = re.match(r"\s*;", rest)
                if m:
                    i += m.end()
                    stmt_start = i + 1
        elif c == ";":
            if at_namespace_scope():
                record(text[stmt_start:i])
            stmt_start = i + 1
        i += 1
    return found, macros


def main(argv):
    targets = collections.OrderedDict()
    current = None
    for arg in argv[1:]:
        if arg == "--target":
            current = None
        elif current is None:
            current = arg
            targets[current] = []
        elif arg.endswith((".cpp", ".cc", ".cxx")):
            targets[current].append(arg)
    problems = []
    for target, files in targets.items():
        names = collections.defaultdict(list)  # name -> [(file, alias, internal, statement)]
        for path in sorted(files):
            declared, macros = file_local_names(path)
            seen = set()
            for name, alias, internal, stmt in declared:
                if (name, internal) not in seen:
                    names[name].append((path, alias, internal, stmt))
                    seen.add((name, internal))
            for macro in set(macros):
                names["#define " + macro].append((path, False, True, "#define " + macro))
        for name, where in sorted(names.items()):
            if len({f for f, _, _, _ in where}) < 2 or not any(internal for _, _, internal, _ in where):
                continue  # one file, or external names only (the linker's business)
            if all(alias for _, alias, _, _ in where) and len({s for _, _, _, s in where}) == 1:
                continue  # the same alias everywhere
            files_of = ", ".join(sorted({f for f, _, _, _ in where}))
            problems.append(f"{target}: {name} defined in {files_of}")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} name(s) with internal linkage defined in several sources of a target "
              "built in unity batches (or beside a namespace-scope name of another source): they "
              "collide when the files share a batch. Share one definition (a layer's private "
              "header, or a lower layer's) or give each its own name.")
        return 1
    counts = ", ".join(f"{t} ({len(f)} files)" for t, f in targets.items())
    print(f"unity_names: no file-local name defined twice in {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
