#!/usr/bin/env python3
"""Fails when a function body in engine/, server/ or client/ spans more than LINES lines (default 150).

The forward pass, the engine's orchestration, the server's start-up and the clients' runs stay readable only
while each function fits on a screen or two (engine/README.md). A body's size is counted as clang-tidy's
readability-function-size counts it: the line of its closing brace minus the line of its opening brace.

This reads the sources themselves, without a compiler: comments, string and character literals (raw strings
too) and preprocessor lines are blanked, then every brace is classified by what precedes it at namespace or
class scope (a namespace, a class / struct / union / enum, an initializer, or a function body: a brace after a
parameter list, its qualifiers, a trailing return type or a constructor's initializer list). Functions defined
inside a function (lambdas, local classes) count toward the enclosing body. The sources are clang-formatted
(scripts/check_format.sh). It reads every host source under those folders (*.cc, *.h) in ~2 s, where
clang-tidy's parse of the .cc files took ~12 CPU minutes on 2 cores; at a threshold of 40 lines both named
the same 104 functions of the tree (2026-12-02).

  scripts/check_function_size.py [--lines N] [--list] [FILE ...]   (default: git ls-files of the folders)
--list prints every function over N lines with its size (to compare with clang-tidy's report).
"""
import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("engine", "server", "client")

TOKEN = re.compile(r"[A-Za-z_]\w*|::|->|&&|\d[\w.']*|\S")
QUALIFIERS = {"const", "noexcept", "override", "final", "volatile", "mutable", "&", "&&", "throw", "try"}
CLASS_KEYS = {"class", "struct", "union", "enum"}


def blank(text):
    """Text with comments, literals and preprocessor lines replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":
            j = i
            while j < n and text[j] != "\n":
                if text[j] == "\\" and j + 1 < n and text[j + 1] == "\n":
                    j += 1
                j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == "\n":
            line_start = True
            out.append(c)
            i += 1
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and i + 1 < n and text[i + 1] == '"' and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            k = text.find("(", i + 2)
            delim = ")" + text[i + 2:k] + '"'
            j = text.find(delim, k)
            j = n if j < 0 else j + len(delim)
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j]))
            i = j
        elif c in "\"'" and not (c == "'" and i > 0 and text[i - 1].isalnum()):  # 1'000 digit separators
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def tokens(text):
    """(token, line) pairs of blanked text."""
    line = 1
    pos = 0
    for m in TOKEN.finditer(text):
        line += text.count("\n", pos, m.start())
        pos = m.start()
        yield m.group(), line


def strip_declarator_tail(head):
    """head without a trailing return type and the qualifiers after its parameter list."""
    h = list(head)
    for k, t, depth in backwards(h):
        if t == "->" and depth == 0:
            h = h[:k]
            break
    while h and h[-1] in QUALIFIERS:
        h.pop()
    if h and h[-1] == ")":
        k = matching_open(h)
        if k > 0 and h[k - 1] in ("noexcept", "throw"):
            return strip_declarator_tail(h[:k - 1])
        if k > 0 and re.fullmatch(r"[A-Z][A-Z0-9_]+", h[k - 1]):  # ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) after ')'
            before = strip_declarator_tail(h[:k - 1])
            if before and before[-1] == ")":
                return before
    return h


def backwards(h):
    """(index, token, parenthesis depth after it) of h's tokens, last first."""
    depth = 0
    for k in range(len(h) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(h[k], 0)
        yield k, h[k], depth


def matching_open(h):
    """Index of the '(' that matches the ')' ending h."""
    for k, t, depth in backwards(h):
        if t == "(" and depth == 0:
            return k
    return 0


def init_list_colon(head):
    """Index of a constructor's initializer-list colon (') :' at parenthesis depth 0), or -1."""
    depth = 0
    for k, t in enumerate(head):
        if t == "(":
            depth += 1
        elif t == ")":
            depth -= 1
        elif t == ":" and depth == 0 and k > 0 and head[k - 1] == ")":
            return k
    return -1


def is_function_body(head):
    """True when head (the tokens before a '{') ends a function declarator or a constructor's initializers."""
    if init_list_colon(head) >= 0:
        return head[-1] in (")", "}")
    h = strip_declarator_tail(head)
    return bool(h) and h[-1] == ")"


def name_of(head):
    """The function's name as written: the identifier (with its scope) before its parameter list."""
    colon = init_list_colon(head)
    h = strip_declarator_tail(head[:colon] if colon >= 0 else head)
    if not h or h[-1] != ")":
        return " ".join(head[-6:])
    j = matching_open(h) - 1
    if j >= 2 and h[j] == ")" and h[j - 1] == "(" and h[j - 2] == "operator":
        return "operator()"
    parts = []
    while j >= 0 and (re.match(r"\w", h[j]) or h[j] in ("::", "~")):
        if parts and re.match(r"\w", h[j]) and re.match(r"\w", parts[-1]):
            break
        parts.append(h[j])
        j -= 1
    return "".join(reversed(parts)) or " ".join(head[-6:])


def functions(text):
    """(name, first line, body lines) of every function defined at namespace or class scope in text."""
    stack = []  # scope kinds: 'ns', 'class', 'init', 'fn' (a function body, or anything inside one)
    head = []
    found = []
    for t, line in tokens(blank(text)):
        inside_fn = any(k[0] == "fn" for k in stack)
        if t == "{":
            if inside_fn:
                stack.append(("block", line, None))
                continue
            if init_list_colon(head) >= 0 and (re.match(r"\w", head[-1]) or head[-1] == ">"):
                stack.append(("member_init", line, None))  # a '{}' member initializer of a constructor
                continue
            if head[:1] in (["namespace"], ["extern"]) or head[:2] == ["inline", "namespace"]:
                kind = "ns"
            elif is_function_body(head):
                kind = "fn"
            elif "=" in head or (head and head[-1] in ("]", ",", "(", "return")):
                kind = "init"
            elif any(k in CLASS_KEYS for k in head):
                kind = "class"
            else:
                kind = "init"
            stack.append((kind, line, name_of(head) if kind == "fn" else None))
            head = []
        elif t == "}":
            if not stack:
                continue
            kind, begin, name = stack.pop()
            if kind == "fn":
                found.append((name, begin, line - begin))
            if kind == "member_init":
                head.append("}")
            elif not any(k[0] == "fn" for k in stack):
                head = []
        elif t == ";":
            if not inside_fn:
                head = []
        elif not inside_fn:
            if t == ":" and head in (["public"], ["private"], ["protected"]):
                head = []  # an access specifier
            else:
                head.append(t)
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=150)
    parser.add_argument("--list", action="store_true")
    parser.add_argument("files", nargs="*")
    args = parser.parse_args()
    files = args.files or subprocess.run(
        ["git", "ls-files"] + [f"{d}/*.{e}" for d in FOLDERS for e in ("cc", "h")],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
    over = []
    for f in files:
        path = ROOT / f if not Path(f).is_absolute() else Path(f)
        for name, begin, lines in functions(path.read_text()):
            if lines > args.lines:
                over.append(f"{f}:{begin}: {name}: {lines} lines (threshold {args.lines})")
    if args.list:
        print("\n".join(over))
        return 0
    if over:
        print(f"check_function_size: functions in {', '.join(FOLDERS)} over {args.lines} lines:")
        print("\n".join(over))
        return 1
    print(f"check_function_size: {len(files)} files under {', '.join(FOLDERS)}, no function over {args.lines} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
