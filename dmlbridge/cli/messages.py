"""Messages in the command line's terms: an error's Python keywords (``max_tensor_bytes=``, ``int64='saturate'``)
become the flags they came from (``--max-tensor-bytes``, ``--int64 saturate``), on one line.

    >>> in_flags("raise max_tensor_bytes (None: 17179869184)")
    'raise --max-tensor-bytes (the default: 17179869184)'
"""

from __future__ import annotations

import re

__all__ = ["in_flags", "one_line"]

# Messages speak Python (a keyword and its value); on the command line they name the flag instead. Text the user
# gave (names and paths, which messages quote with repr) is never rewritten.
_KEYWORDS = ("max_tensor_bytes|max_output_bytes|max_manifest_bytes|max_buffer_bytes|max_constants|max_nodes|"
             "external_data_root|min_dims|allow_lossy|strict|checksum")
_FLAGS = [
    (re.compile(rf"(?<![\w-])({_KEYWORDS}|alignment)=(\d+)"),
     lambda m: f"--{m.group(1).replace('_', '-')} {m.group(2)}"),
    (re.compile(rf"(?<![\w-])({_KEYWORDS})=(True)?"), lambda m: f"--{m.group(1).replace('_', '-')}"),
    (re.compile(r"(?<![\w-])(max_tensor_bytes|max_output_bytes|max_manifest_bytes|max_buffer_bytes|max_constants|"
                r"max_nodes|external_data_root|min_dims|allow_lossy)\b"),
     lambda m: f"--{m.group(1).replace('_', '-')}"),
    (re.compile(r"^(alignment|include|exclude|kinds) (must|names|holds)"), lambda m: f"--{m.group(1)} {m.group(2)}"),
    (re.compile(r"(?<![\w-])min_bytes\b"), lambda m: "--min-bytes"),
    (re.compile(r"(?<![\w-])input_shapes\b"), lambda m: "--input-shape"),
    (re.compile(r"(?<![\w-])dim_params\b"), lambda m: "--dim-param"),
    (re.compile(r"\(None: (\d+)\)"), lambda m: f"(the default: {m.group(1)})"),
    (re.compile(r"(?<![\w-])out_prefix\b"), lambda m: "-o/--output"),
    (re.compile(r"(?<![\w-])bin_path="), lambda m: "a format-1 manifest's .bin (the Python API's bin_path=)"),
    (re.compile(r" \(--[a-z-]+(?: N)? on the command line\)"), lambda m: ""),
    (re.compile(r"; --[a-z-]+ on the command line"), lambda m: ""),
]
# A quoted name or path, as repr writes it: opened after a space or bracket, closed before one or at the end
# (an apostrophe inside a word, as in "model's", opens nothing).
_QUOTED = re.compile(r"""(?<![\w'"])('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")(?![\w'"])""")


# A keyword whose value is a quoted word (int64='saturate'): the end of one unquoted piece, the quoted value, and,
# for Target(..., int64='saturate', allow_lossy=True), the start of the next unquoted piece.
_KEYWORD_BEFORE_VALUE = re.compile(r"(?<![\w-])(Target\(\.\.\., )?int64=$")
_INT64_VALUES = ("'emulate'", "'narrow'", "'saturate'")
_TARGET_REST = ", allow_lossy=True)"


def in_flags(message: str) -> str:
    """``message`` with each Python keyword replaced by the command-line flag it came from."""
    pieces = _QUOTED.split(message)
    for index in range(0, len(pieces) - 2, 2):  # int64='saturate' -> --int64 saturate (the value is quoted text)
        keyword = _KEYWORD_BEFORE_VALUE.search(pieces[index])
        if keyword is None or pieces[index + 1] not in _INT64_VALUES:
            continue
        flags = f"--int64 {pieces[index + 1][1:-1]}"
        if keyword.group(1) and pieces[index + 2].startswith(_TARGET_REST):
            flags += " --allow-lossy"
            pieces[index + 2] = pieces[index + 2][len(_TARGET_REST):]
        elif keyword.group(1):
            continue  # (another Target(...) than the one this knows: left as Python)
        pieces[index] = pieces[index][: keyword.start()] + flags
        pieces[index + 1] = ""
    for index in range(0, len(pieces), 2):  # (the odd pieces are the quoted text)
        for pattern, replacement in _FLAGS:
            pieces[index] = pattern.sub(replacement, pieces[index])
    return "".join(pieces)


def one_line(text: str) -> str:
    """``text`` on one line, its runs of white space made one space."""
    return " ".join(text.split())
