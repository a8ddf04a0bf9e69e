"""The run's report: the table on stdout, the JSON lines, the plot."""
import json


def print_table(rows, names, notes):
    """The markdown table of every shape (fai's time and rate, each peer's time and ratio), then
    the notes: how each library was called, and any output that differs from fai's."""
    head = ["shape", "what", "fai ms"] + [f"{n} ms (x fai)" for n in names[1:]]
    lines = [head]
    for r in rows:
        res = r["results"]
        cells = [r["shape"], r["what"],
                 f"{res['fai']['median_ms']:.2f} ({r['rate']})"]
        for n in names[1:]:
            x = res.get(n, {})
            if "median_ms" in x:
                flag = "" if x["same_result"] else " !"
                cells.append(f"{x['median_ms']:.2f} ({x['ratio']:.2f}x){flag}")
            else:
                cells.append("n/a")
        lines.append(cells)
    widths = [max(len(line[c]) for line in lines) for c in range(len(head))]
    print()
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for line in lines[1:]:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(line, widths)) + " |")
    print()
    print("(x fai) = peer median / fai median: above 1, fai is faster. '!' marks a peer whose "
          "output differs from fai's.")
    for n in notes:
        print("  " + n)


def write_json(rows, path):
    """One JSON object per shape, as the table's rows hold them; returns None, or the line to
    print when the file could not be written (the table is already out)."""
    try:
        with open(path, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    except (OSError, ValueError) as exc:
        return f"json: could not write {path}: {exc}"
    return None


def write_plot(rows, names, path, title):
    """Writes the PNG; returns the line to print, which says where matplotlib comes from when it
    is missing, or why the file could not be written (the plot is optional, the table is the
    result)."""
    try:
        _plot(rows, names, path, title)
    except ImportError:
        return ("plot: matplotlib is not installed (the package's bench extra has it: pip "
                "install './python[bench]'); no PNG written")
    except (OSError, ValueError) as exc:
        return f"plot: could not write {path}: {exc}"
    return f"plot: {path}"


def _plot(rows, names, path, title):
    """Bars per shape, one per library, on a log scale (the shapes' times differ by 100x)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = [r["shape"] for r in rows]
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(2 + 1.6 * len(shapes), 4.5))
    for n, lib in enumerate(names):
        xs, ys = [], []
        for s, r in enumerate(rows):
            t = r["results"].get(lib, {}).get("median_ms")
            if t is not None:
                xs.append(s + (n - (len(names) - 1) / 2) * width)
                ys.append(t)
        bars = ax.bar(xs, ys, width, label=lib)
        for bar, y in zip(bars, ys):
            ax.annotate(f"{y:.3g}", (bar.get_x() + bar.get_width() / 2, y), ha="center",
                        va="bottom", fontsize=7)
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels([f"{r['shape']}\n{r['what']}" for r in rows], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("median time per call, ms (log scale; lower is better)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
