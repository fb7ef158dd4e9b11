#!/usr/bin/python3
"""Write a large lesson guide (default 2 MB) to stdout or FILE: many sections
of everything guide.js renders (check headings, run and plain code blocks,
hints, lists, tables of text, links, emphasis), for the render-time figure of
tests/e2e/t790_guide.mjs and the API's size tests (t750_guides.py).

    make-big-guide.py [--bytes N] [--steps NAME,NAME...] [FILE]
"""
import argparse
import sys


def section(i, step):
    head = f"## Check: {step}" if step else f"## Section {i}"
    return f"""{head}

Paragraph {i}: *emphasis*, **strong**, `code {i}`, a [relative link](notes.txt)
and an [https link](https://127.0.0.1:9/outside-{i}). Text with <raw>html</raw>
that stays text, and a list:

- item one of {i}
- item two, with `inline code`
  1. nested {i}
  2. nested again

```run
echo section {i}
ls -l /root/lab | head -n {i % 7 + 1}
```

```
plain code block {i}
```

> [!HINT]
> A hint for section {i}, with **strong** text.

> A plain quote {i}.

"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", type=int, default=2 * 1000 * 1000)
    ap.add_argument("--steps", default="")
    ap.add_argument("file", nargs="?")
    a = ap.parse_args()
    steps = [s for s in a.steps.split(",") if s]
    out, n, i = ["# A very large guide\n\n"], 20, 0
    while n < a.bytes:
        s = section(i, steps[i] if i < len(steps) else None)
        out.append(s)
        n += len(s.encode())
        i += 1
    text = "".join(out)
    if a.file:
        with open(a.file, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


main()
