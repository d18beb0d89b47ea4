"""Column names in halfway's result files that were renamed, a reader that applies them, and
the parser of the histogram columns (trace.csv `hist`, blocks.csv `scale_hist`).

The count of non-zero values that became zero was called `underflow` until it was renamed
`flushed` (IEEE 754's underflow flag means tiny and inexact, which is a different count). Run
folders written before the rename still read: their old columns get the new names.
"""

RENAMED = {
    "underflow": "flushed",                              # trace.csv, scale_window.csv
    "underflow_fraction": "flushed_fraction",            # scale_window.csv
    "grad_underflow": "grad_flushed",                    # steps.csv, sweep.csv
    "grad_underflow_fraction": "grad_flushed_fraction",  # sweep.csv
}


def upgrade(df):
    """`df` with the old column names of RENAMED replaced (where the new one is absent)."""
    old = {k: v for k, v in RENAMED.items() if k in df.columns and v not in df.columns}
    return df.rename(columns=old) if old else df


def parse_hist(text):
    """A histogram column, 'e:count;e:count', as {e: count} ({} for an empty or missing
    cell, which pandas reads as NaN)."""
    out = {}
    if isinstance(text, str) and text:
        for item in text.split(";"):
            e, c = item.split(":")
            out[int(e)] = out.get(int(e), 0) + int(c)
    return out
