#!/usr/bin/env python3
"""Render a Terraform .tftpl template the way templatefile() does, for the subset of the
template language Strata's config template uses:

  ${name}                          a variable (string, number or bool)
  $${  %%{                         literal "${" and "%{"
  %{ for K, V in name ~} ... %{ endfor ~}
                                   a loop over a map, in lexical key order (as Terraform)
  %{ if name ~} ... [%{ else ~} ...] %{ endif ~}
                                   a condition on a bool variable (a non-bool is refused)

A "~" next to "}" (or after "{") strips all whitespace on that side, as in HCL. Anything else
(function calls, expressions, conditions other than a bare bool variable) is refused with an error rather than guessed at, so a
template that grows beyond this subset fails the test instead of rendering wrongly; when the
terraform binary is present scripts/check-terraform.sh also compares this renderer's output
with `terraform console`'s templatefile().

  render_template.py TEMPLATE VARS.json [OUT]      (OUT defaults to stdout)
"""

import json
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_-]*"
TOKEN = re.compile(r"\$\$\{|%%\{|\$\{|%\{")
FOR_HEAD = re.compile(rf"^for\s+({IDENT})\s*,\s*({IDENT})\s+in\s+({IDENT})$")
IF_HEAD = re.compile(rf"^if\s+({IDENT})$")


class TemplateError(Exception):
    pass


def scalar(value, where):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return value
    raise TemplateError(f"{where}: cannot interpolate a {type(value).__name__}")


def tokenize(text):
    """Yields ("text", s) and ("interp"|"directive", body, strip_left, strip_right)."""
    pos = 0
    while True:
        m = TOKEN.search(text, pos)
        if not m:
            yield ("text", text[pos:])
            return
        yield ("text", text[pos:m.start()])
        tok = m.group()
        if tok in ("$${", "%%{"):
            yield ("text", tok[1:])
            pos = m.end()
            continue
        end = text.find("}", m.end())
        if end < 0:
            raise TemplateError(f"unterminated {tok} at offset {m.start()}")
        body = text[m.end():end]
        strip_left = body.startswith("~")
        strip_right = body.endswith("~")
        body = body.strip("~").strip()
        kind = "interp" if tok == "${" else "directive"
        yield (kind, body, strip_left, strip_right)
        pos = end + 1


def parse(text):
    """Returns a list of nodes: str, ("var", name), ("for", k, v, map, body),
    ("if", name, then, otherwise)."""
    items = list(tokenize(text))
    # Apply strip markers to the neighbouring text tokens.
    for i, item in enumerate(items):
        if item[0] == "text":
            continue
        _, _, left, right = item
        if left and i > 0 and items[i - 1][0] == "text":
            items[i - 1] = ("text", items[i - 1][1].rstrip())
        if right and i + 1 < len(items) and items[i + 1][0] == "text":
            items[i + 1] = ("text", items[i + 1][1].lstrip())

    def block(i, closing):
        """Parses up to one of the directives in `closing` (a tuple; empty at the top level).
        Returns the nodes, the index after the closing directive and which one it was."""
        nodes = []
        while i < len(items):
            item = items[i]
            if item[0] == "text":
                if item[1]:
                    nodes.append(item[1])
                i += 1
            elif item[0] == "interp":
                if not re.fullmatch(IDENT, item[1]):
                    raise TemplateError(f"unsupported expression ${{{item[1]}}}")
                nodes.append(("var", item[1]))
                i += 1
            else:
                body = item[1]
                if body in closing:
                    return nodes, i + 1, body
                m = FOR_HEAD.match(body)
                if m:
                    inner, i, _ = block(i + 1, ("endfor",))
                    nodes.append(("for", m.group(1), m.group(2), m.group(3), inner))
                    continue
                m = IF_HEAD.match(body)
                if m:
                    then, i, end = block(i + 1, ("else", "endif"))
                    otherwise = []
                    if end == "else":
                        otherwise, i, _ = block(i, ("endif",))
                    nodes.append(("if", m.group(1), then, otherwise))
                    continue
                raise TemplateError(f"unsupported directive %{{{body}}}")
        if closing:
            raise TemplateError(f"missing %{{{closing[-1]}}}")
        return nodes, i, None

    nodes, _, _ = block(0, ())
    return nodes


def render_nodes(nodes, scope):
    out = []
    for node in nodes:
        if isinstance(node, str):
            out.append(node)
        elif node[0] == "var":
            name = node[1]
            if name not in scope:
                raise TemplateError(f"vars map does not contain key {name!r}")
            out.append(scalar(scope[name], name))
        elif node[0] == "if":
            _, name, then, otherwise = node
            if name not in scope:
                raise TemplateError(f"vars map does not contain key {name!r}")
            if not isinstance(scope[name], bool):
                raise TemplateError(f"{name}: %{{ if }} needs a bool, got {scope[name]!r}")
            out.append(render_nodes(then if scope[name] else otherwise, scope))
        else:
            _, k, v, coll, body = node
            if coll not in scope:
                raise TemplateError(f"vars map does not contain key {coll!r}")
            mapping = scope[coll]
            if not isinstance(mapping, dict):
                raise TemplateError(f"{coll}: %{{ for K, V in ... }} needs a map")
            for key in sorted(mapping):
                out.append(render_nodes(body, {**scope, k: key, v: mapping[key]}))
    return "".join(out)


def referenced(nodes, bound=frozenset()):
    """Names of the template variables the nodes read (loop variables excluded)."""
    names = set()
    for node in nodes:
        if isinstance(node, str):
            continue
        if node[0] == "var":
            if node[1] not in bound:
                names.add(node[1])
        elif node[0] == "if":
            _, name, then, otherwise = node
            if name not in bound:
                names.add(name)
            names |= referenced(then, bound) | referenced(otherwise, bound)
        else:
            _, k, v, coll, body = node
            if coll not in bound:
                names.add(coll)
            names |= referenced(body, bound | {k, v})
    return names


def render(text, variables):
    """Renders like templatefile(); also refuses variables the template never reads, so the
    sample variables cannot drift from the template unnoticed."""
    nodes = parse(text)
    unused = set(variables) - referenced(nodes)
    if unused:
        raise TemplateError(f"variables not used by the template: {', '.join(sorted(unused))}")
    return render_nodes(nodes, variables)


def main(argv):
    if len(argv) not in (3, 4):
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        text = f.read()
    with open(argv[2], encoding="utf-8") as f:
        variables = json.load(f)
    try:
        result = render(text, variables)
    except TemplateError as e:
        sys.stderr.write(f"{argv[1]}: {e}\n")
        return 1
    if len(argv) == 4:
        with open(argv[3], "w", encoding="utf-8") as f:
            f.write(result)
    else:
        sys.stdout.write(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
