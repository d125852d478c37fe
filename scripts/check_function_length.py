#!/usr/bin/env python3
"""Lists the functions longer than a limit (80 lines, from the signature's first line to the closing brace) in
app/, core/, kernels/ and models/; exits 1 when there is one. Run by ctest as `function_length`.

A reader, not a parser: it follows braces outside comments, strings and character literals, and takes a brace
that opens at namespace or class level after a statement holding a parenthesised list for a function body.
Lambdas and blocks inside a function count towards it. Usage: check_function_length.py [ROOT] [--limit N]
"""
import pathlib
import re
import sys

FOLDERS = ("app", "core", "kernels", "models")
SUFFIXES = {".cpp", ".h", ".cu", ".cuh"}
NOT_A_FUNCTION = re.compile(r"^\s*(if|for|while|switch|else|do|try|catch|return)\b|=\s*\[|\]\s*\(")
SCOPE = re.compile(r"^\s*(namespace|extern\s+\"C\"|(template\s*<[^>]*>\s*)?(class|struct|union|enum))\b")


def code_only(text):
    """The text with comments, strings and character literals blanked out, lines kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def long_functions(path, limit):
    lines = code_only(path.read_text(encoding="utf-8", errors="replace")).split("\n")
    stack = []  # (kind, first line of the statement that opened it, that statement)
    statement, statement_line = "", 0
    found = []
    in_directive = False
    for number, line in enumerate(lines, 1):
        # A preprocessor directive, with its continuation lines (a macro's body is no function).
        if in_directive or line.lstrip().startswith("#"):
            in_directive = line.rstrip().endswith("\\")
            continue
        for c in line:
            if not statement.strip():
                statement_line = number
            if c == "{":
                in_scope = all(entry[0] == "scope" for entry in stack)
                if SCOPE.match(statement):
                    kind = "scope"
                elif in_scope and "(" in statement and ")" in statement and not NOT_A_FUNCTION.search(statement):
                    kind = "function"
                else:
                    kind = "block"
                stack.append((kind, statement_line, statement.strip()))
                statement = ""
            elif c == "}":
                if stack:
                    kind, start, text = stack.pop()
                    if kind == "function" and number - start + 1 > limit:
                        name = re.sub(r"\s+", " ", text.split("(")[0]).split(" ")[-1]
                        found.append((number - start + 1, start, name))
                statement = ""
            elif c == ";":
                statement = ""
            else:
                statement += c
        statement += " "
    return found


def main():
    args = sys.argv[1:]
    limit = 80
    if "--limit" in args:
        k = args.index("--limit")
        limit = int(args[k + 1])
        del args[k : k + 2]
    root = pathlib.Path(args[0] if args else pathlib.Path(__file__).resolve().parent.parent)
    failures = 0
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in SUFFIXES:
                continue
            for length, start, name in long_functions(path, limit):
                print(f"{path.relative_to(root)}:{start}: {name} is {length} lines (limit {limit})")
                failures += 1
    if failures:
        print(f"{failures} function(s) over {limit} lines: split them into named steps")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
