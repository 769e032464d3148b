"""The engine's part of every findings document: the task table, and human notes kept verbatim.

The document is regenerated after every complete run; a section headed `## Human notes` is
located with markdown-it-py's token map and carried over byte for byte.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

from markdown_it import MarkdownIt

from orchestrator.schema import TodoState

HUMAN_NOTES_HEADING = "## Human notes"
HUMAN_NOTES_PLACEHOLDER = "_Write here. This section is kept verbatim every time the document is regenerated._\n"


def md_table(header: list[str], rows: list[list[object]]) -> str:
    def cell(value: object) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def task_table(state: TodoState) -> str:
    """Same columns as the todos (and as `orchestrate status`)."""
    rows = []
    for todo in state.todos:
        duration = f"{todo.duration_s:.1f}" if todo.duration_s is not None else ""
        rows.append(
            [
                todo.id,
                todo.content,
                todo.priority.value,
                todo.status.value,
                todo.attempts,
                duration,
                ", ".join(todo.depends_on),
                ", ".join(todo.needs),
            ]
        )
    return md_table(["id", "content", "priority", "status", "attempts", "duration s", "depends on", "needs"], rows)


def timing_summary(state: TodoState) -> str:
    """Campaign span against the tasks' own time: what the engine itself cost.

    Over several resumes the span includes the time nobody was running it, so the figure is
    meaningful for an uninterrupted run.
    """
    timed = [t for t in state.todos if t.started_at and t.finished_at and t.duration_s is not None]
    if not timed:
        return ""
    span_s = (max(t.finished_at for t in timed) - min(t.started_at for t in timed)).total_seconds()
    work_s = sum(t.duration_s for t in timed)
    overhead_s = span_s - work_s
    share = overhead_s / span_s * 100 if span_s > 0 else 0.0
    return (
        f"Campaign span {span_s:.1f} s; the tasks' own time {work_s:.1f} s; orchestration overhead"
        f" {overhead_s:.2f} s ({share:.2f}% of the span, from the todo timestamps).\n"
    )


def existing_human_notes(document_path: Path) -> str:
    """The body of the human-notes section of the current document, or the placeholder."""
    if not document_path.exists():
        return HUMAN_NOTES_PLACEHOLDER
    text = document_path.read_text()
    lines = text.splitlines(keepends=True)
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    start = end = None
    for index, token in enumerate(tokens):
        if token.type != "heading_open" or token.map is None:
            continue
        title = tokens[index + 1].content.strip()
        if start is not None and token.tag in ("h1", "h2"):
            end = token.map[0]
            break
        if token.tag == "h2" and title == HUMAN_NOTES_HEADING[3:]:
            start = token.map[1]
    if start is None:
        return HUMAN_NOTES_PLACEHOLDER
    return "".join(lines[start : end if end is not None else len(lines)]).strip("\n") + "\n"


HTML_STYLE = """<style>
body { font: 15px/1.5 system-ui, sans-serif; max-width: 80rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
table { border-collapse: collapse; margin: 1rem 0; font-size: 13px; display: block; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; position: sticky; top: 0; }
tr:nth-child(even) td { background: #fafafa; }
code, pre { background: #f5f5f5; font-size: 12px; }
pre { padding: .5rem; overflow-x: auto; }
img { max-width: 100%; }
</style>"""


def render_html(markdown_text: str, folder: Path | None = None, title: str = "findings") -> str:
    """The document as one HTML page: styled tables, and the plots beside it in ``folder``
    embedded (data URIs), so the page can be mailed or attached alone."""
    body = MarkdownIt("commonmark").enable("table").render(markdown_text)
    if folder is not None:

        def embed(match: re.Match[str]) -> str:
            image = folder / match[1]
            if image.suffix != ".png" or not image.is_file() or "/" in match[1]:
                return match[0]
            encoded = base64.b64encode(image.read_bytes()).decode()
            return f'<img src="data:image/png;base64,{encoded}"'

        body = re.sub(r'<img src="([^"]+)"', embed, body)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"{HTML_STYLE}</head><body>\n{body}</body></html>\n"
    )
