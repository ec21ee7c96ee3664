"""Text out of source bytes: PDF pages (pypdf) and plain text; HTML is read into pages by
prism.ingest.pages."""

from __future__ import annotations

import io
import logging
import re

_SPACES = re.compile(r"[^\S\n]+")  # any whitespace but the newline, NBSP and other Unicode spaces included
_INVISIBLE = re.compile("[\u200b\u200c\u200d\u2060\ufeff\u00ad]")  # zero-width spacers, soft hyphens


class IngestError(ValueError):
    """A source that cannot be made into a filing; the message names the source and the reason."""

    def __init__(self, source: str, reason: str):
        super().__init__(f"{source}: {reason}")
        self.source, self.reason = source, reason


def normalize(text: str) -> str:
    """Runs of spaces collapsed, lines stripped, empty lines dropped (paragraph breaks kept as
    one empty line where the source had any)."""
    text = _INVISIBLE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
    out: list[str] = []
    for line in lines:
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip()


def _page_text(text: str) -> str:
    """A PDF page's lines, without the empty ones (pypdf's blank lines carry no paragraph meaning)."""
    return "\n".join(line for line in normalize(text).split("\n") if line)


def pdf_pages(data: bytes, source: str) -> list[str]:
    """One text per page, in page order; pages without text are kept as "".

    Raises IngestError for a file pypdf cannot read, one locked with a password, one with no
    pages, or one with no text on any page (scanned images need OCR, which this does not do).
    """
    import pypdf
    from pypdf.errors import DependencyError, FileNotDecryptedError, PyPdfError

    # pypdf reports recoverable damage through logging; the outcome (text or IngestError) is what counts.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise IngestError(source, "the PDF is encrypted with a password")
        texts = [_page_text(page.extract_text() or "") for page in reader.pages]
    except IngestError:
        raise
    except FileNotDecryptedError:
        raise IngestError(source, "the PDF is encrypted with a password") from None
    except DependencyError as err:
        raise IngestError(source, f"the PDF needs a missing library: {err}") from None
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as err:
        # pypdf raises plain Python errors too on damaged object streams.
        raise IngestError(source, f"not a readable PDF ({type(err).__name__}: {err})") from None
    if not texts:
        raise IngestError(source, "the PDF has no pages")
    if not any(texts):
        raise IngestError(source, f"no text on any of its {len(texts)} pages (image-only PDF; OCR is not done)")
    return texts


def plain_text(data: bytes, source: str) -> tuple[str, bool]:
    """The text, spacing kept, and whether it had to be read as Windows-1252 (it was not UTF-8)."""
    if b"\x00" in data[:8192]:
        raise IngestError(source, "binary content in a text file")
    try:
        text, cp1252 = data.decode("utf-8-sig"), False
    except UnicodeDecodeError:
        try:
            text, cp1252 = data.decode("cp1252"), True
        except UnicodeDecodeError as err:
            raise IngestError(source, f"neither UTF-8 nor Windows-1252 text (byte {err.start})") from None
    if not text.strip():
        raise IngestError(source, "the file holds no text")
    return text, cp1252  # as written: fixed-width tables keep their columns
