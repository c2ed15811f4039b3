"""A PyPI project's long description (its README, in Markdown, reStructuredText or plain text)
as one line of prose: what the project is for, without the markup, the code, the badges and the
sections about packaging.

A catalog item's description should say what the item is, as a Debian maintainer's long
description or a wine review does; a README also holds installation commands, code samples,
licence and contributor sections and build badges, which say nothing about what the project does
and would make every README look alike to a model that reads them.
"""

from __future__ import annotations

import html
import re

# Sections about how a project is packaged, installed, developed or licensed: dropped whole.
PACKAGING_SECTION = re.compile(
    r"^\W*(install(ation|ing)?|setup|set-up|requirements|dependencies|licen[cs]e|copyright|"
    r"contribut(e|ing|ors?)|authors?|maintainers?|acknowledge?ments?|credits|thanks|changelog|"
    r"change ?log|changes|release notes|release history|history|news|development|developing|"
    r"testing|tests|running tests|build(ing)?|citation|citing|cite|support|contact|links|"
    r"table of contents|contents|toc|badges|status)\b",
    re.IGNORECASE,
)
FENCED_CODE = re.compile(r"^(`{3,}|~{3,}).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
HTML_BLOCK_OF_CODE = re.compile(r"<(pre|code|script|style)\b.*?</\1>", re.IGNORECASE | re.DOTALL)
HTML_TAG = re.compile(r"</?[A-Za-z][^<>]*>")
MARKDOWN_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)|!\[[^\]]*\]\[[^\]]*\]")
MARKDOWN_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)|\[([^\]]*)\]\[[^\]]*\]")
LINK_DEFINITION = re.compile(r"^\s*\[[^\]]+\]:\s*\S+.*$", re.MULTILINE)
RST_DIRECTIVE = re.compile(r"^([ \t]*)\.\. [^\n]*(?:\n(?:\1[ \t]+[^\n]*|[ \t]*)(?=\n|$))*", re.MULTILINE)
RST_LITERAL_BLOCK = re.compile(r"::[ \t]*\n(?:[ \t]*\n)+((?:[ \t]+[^\n]*\n|[ \t]*\n)+)")
RST_ROLE = re.compile(r":[A-Za-z:+-]+:`([^`<]*?)(?:\s*<[^>]*>)?`")
RST_LINK = re.compile(r"`([^`<]+?)\s*<[^>]+>`_{1,2}")
RST_SUBSTITUTION = re.compile(r"\|[^|\s][^|]*\|_{0,2}")
URL = re.compile(r"\b(?:https?|ftp)://\S+|\bwww\.\S+", re.IGNORECASE)
INLINE_MARKUP = re.compile(r"[`*_~]{1,3}")
TABLE_RULE = re.compile(r"^[\s|:+=-]+$")
UNDERLINE = re.compile(r"^([=\-~^\"'`#*+.])\1{2,}\s*$")
MARKDOWN_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
LIST_MARKER = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")
SPACES = re.compile(r"\s+")


def strip_code(text: str) -> str:
    """``text`` without fenced code blocks, HTML code blocks, comments and reStructuredText
    directives (``.. code-block::``, ``.. image::``) and literal blocks (after ``::``)."""
    text = FENCED_CODE.sub("\n", text)
    text = HTML_COMMENT.sub(" ", text)
    text = HTML_BLOCK_OF_CODE.sub(" ", text)
    text = RST_LITERAL_BLOCK.sub(".\n\n", text)
    return RST_DIRECTIVE.sub("", text)


def sections(lines: list[str]) -> list[tuple[str, list[str]]]:
    """(heading, body lines) in order; the text before the first heading has the heading ""."""
    found: list[tuple[str, list[str]]] = [("", [])]
    position = 0
    while position < len(lines):
        line = lines[position]
        following = lines[position + 1] if position + 1 < len(lines) else ""
        heading = MARKDOWN_HEADING.match(line)
        if heading:
            found.append((heading.group(1), []))
        elif line.strip() and UNDERLINE.match(following) and not UNDERLINE.match(line):
            found.append((line.strip(), []))
            position += 1
        elif UNDERLINE.match(line):
            pass  # an overline or a stray rule
        else:
            found[-1][1].append(line)
        position += 1
    return found


def prose_line(line: str) -> str:
    """One line of a kept section with its inline markup, links, images and URLs removed."""
    if TABLE_RULE.match(line):
        return ""
    line = MARKDOWN_IMAGE.sub(" ", line)
    line = MARKDOWN_LINK.sub(lambda match: match.group(1) or match.group(2) or "", line)
    line = RST_LINK.sub(r"\1", line)
    line = RST_ROLE.sub(r"\1", line)
    line = RST_SUBSTITUTION.sub(" ", line)
    line = HTML_TAG.sub(" ", line)
    line = URL.sub(" ", line)
    line = LIST_MARKER.sub("", line)
    line = INLINE_MARKUP.sub("", line)
    return line.replace("|", " ").strip()


def readme_text(description: str, max_words: int) -> str:
    """The README's prose, outside its packaging sections, as one line of at most ``max_words``
    whitespace-separated words."""
    text = html.unescape(strip_code(description.replace("\r\n", "\n").replace("\r", "\n")))
    text = LINK_DEFINITION.sub("", text)
    kept = []
    for heading, body in sections(text.split("\n")):
        if heading and PACKAGING_SECTION.match(prose_line(heading)):
            continue
        kept.extend(prose_line(line) for line in body)
    words = SPACES.sub(" ", " ".join(kept)).strip().split(" ")
    return " ".join(words[:max_words]) if words != [""] else ""
