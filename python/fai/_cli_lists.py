"""Comma-separated lists on the package's command lines (python -m fai.bench's --peers,
python -m fai.bench_model's --contexts and --implementations): the same rules and messages."""


def comma_list(text, what):
    """The entries of text, each once, none empty; ValueError saying which rule text breaks
    (`what` names the entries expected, for the message)."""
    entries = [e.strip() for e in text.split(",")]
    if "" in entries:
        raise ValueError(f"{text!r} has an empty entry (expected {what} separated by commas)")
    repeated = sorted({e for e in entries if entries.count(e) > 1})
    if repeated:
        raise ValueError(f"{text!r} names {', '.join(repeated)} more than once")
    return entries
