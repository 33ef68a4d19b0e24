"""MkDocs hook: the configuration page's reference, made from the configuration model at every build
(``laketide.config.reference``), so the published keys, types and defaults are the code's."""

MARKER = "<!-- configuration reference -->"


def on_page_markdown(markdown, page, **_):
    if MARKER not in markdown:
        return markdown
    from laketide.config.reference import reference_markdown

    return markdown.replace(MARKER, reference_markdown())
