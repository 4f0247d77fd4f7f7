#!/usr/bin/env python3
"""Writes a command's man page (section 1) from its --help.

  help_to_man.py --version VERSION --out FILE.1 COMMAND [ARGS...]

Every Ferry command prints man-page sections in --help (tools/common/command.h; the two bash
helpers follow it by hand): a line in capitals starts a section (NAME, SYNOPSIS, OPTIONS, ...),
the lines under it are its body. The page keeps that text as it is, so `man ferry-train` and
`ferry-train --help` say the same thing: NAME becomes the one-line "name \\- summary" whatis
entry man-db indexes, every other section is set preformatted (.nf), in its own indentation.
Fails (exit 1, with the reason) when --help fails or has no NAME section.
"""
import argparse
import os
import re
import subprocess
import sys

SECTION = re.compile(r"^[A-Z][A-Z ]*[A-Z]$")


def escape(line):
    """roff-safe text: backslashes, and control characters at the start of a line."""
    line = line.replace("\\", "\\e").replace("-", "\\-")  # \- : an ASCII minus, as typed
    if line.startswith((".", "'")):
        line = "\\&" + line
    return line


def sections(text):
    out, name, body = [], None, []
    for line in text.splitlines():
        if SECTION.match(line):
            if name:
                out.append((name, body))
            name, body = line, []
        elif name:
            body.append(line.rstrip())
    if name:
        out.append((name, body))
    return out


def dedent(lines):
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    indents = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    cut = min(indents) if indents else 0
    return [line[cut:] for line in lines]


def page(command, version, help_text):
    parts = sections(help_text)
    names = [body for name, body in parts if name == "NAME"]
    if not names:
        raise ValueError(f"{command} --help has no NAME section")
    whatis = " ".join(line.strip() for line in names[0] if line.strip())
    if " - " not in whatis:
        raise ValueError(f"{command} --help: NAME is not 'name - summary': {whatis!r}")
    title, summary = whatis.split(" - ", 1)
    lines = [
        f'.TH "{title.upper()}" "1" "" "Ferry {version}" "User Commands"',
        ".SH NAME",
        f"{escape(title)} \\- {escape(summary)}",
    ]
    for name, body in parts:
        if name == "NAME":
            continue
        lines.append(f'.SH "{name}"')
        lines.append(".nf")
        lines += [escape(line) if line else "" for line in dedent(body)]
        lines.append(".fi")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--version", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    if not args.command:
        ap.error("no command")
    command = os.path.basename(args.command[0])
    try:
        run = subprocess.run(args.command + ["--help"], capture_output=True, text=True,
                             timeout=60, check=False)
    except OSError as e:
        print(f"help_to_man: cannot run {args.command[0]}: {e}", file=sys.stderr)
        return 1
    if run.returncode != 0:
        print(f"help_to_man: {command} --help exited {run.returncode}: {run.stderr.strip()}",
              file=sys.stderr)
        return 1
    try:
        text = page(command, args.version, run.stdout)
    except ValueError as e:
        print(f"help_to_man: {e}", file=sys.stderr)
        return 1
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
