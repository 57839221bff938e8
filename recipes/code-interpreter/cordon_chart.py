"""A matplotlib figure described as data: the "chart" of a cell's result, in the shape E2B's
code interpreter gives it (docs/e2b.md, "Charts"), loaded into each Python kernel by the
interpreter server (code-interpreter, STARTUP) and called by a display formatter when a
figure is shown.

  {"type": "line" | "scatter" | "bar" | "pie" | "box_and_whisker" | "superchart" | "unknown",
   "title": S | None, "elements": [...], and by type:
   2-D (all but pie): "x_label", "y_label", "x_unit", "y_unit" (S | None; a unit is what a
       label has in brackets, "time (s)" -> "s")
   line, scatter: "x_ticks", "y_ticks" ([number | S]), "x_tick_labels", "y_tick_labels" ([S]),
       "x_scale", "y_scale" ("linear", "log", "datetime", "categorical", ...);
       elements [{"label", "points": [[x, y], ...]}]
   bar: elements [{"label", "group", "value"}] (x_label names the categories' axis)
   pie: elements [{"label", "angle" (degrees), "radius"}]
   box_and_whisker: elements [{"label", "min", "first_quartile", "median", "third_quartile",
       "max", "outliers": [...]}]
   superchart (a figure of several axes): elements [chart, ...]}

Numbers that JSON cannot carry (NaN, infinities) are None; dates are ISO 8601 strings. A
chart of more than MAX_POINTS points in all is not described (the PNG still comes back).
"""
import datetime
import math
import re

MAX_POINTS = 20000
UNIT = re.compile(r"\s\((.*?)\)|\[(.*?)\]")


def chart_of(fig):
    """@fig's chart, or None (no axes, nothing drawn, too big)."""
    axes = [ax for ax in fig.get_axes() if ax.has_data()]
    if not axes:
        return None
    if len(fig.get_axes()) == 1:
        chart = axes_chart(axes[0])
    else:
        sup = getattr(fig, "_suptitle", None)
        chart = {"type": "superchart", "title": text_or_none(sup.get_text() if sup else ""),
                 "elements": [axes_chart(ax) for ax in fig.get_axes()]}
    return chart if size_of(chart) <= MAX_POINTS else None


def size_of(chart):
    return sum(size_of(e) if "type" in e else 1 + len(e.get("points", ())) + len(e.get("outliers", ()))
               for e in chart["elements"])


# ---- values ----

def text_or_none(s):
    return s if s else None


def value(v):
    """@v as JSON carries it: a number, a string, or None."""
    if isinstance(v, (datetime.datetime, datetime.date)):
        return v.isoformat()
    if getattr(getattr(v, "dtype", None), "kind", None) == "M":  # numpy's datetime64
        return str(v.astype("datetime64[s]"))
    if isinstance(v, str):
        return v
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    if not math.isfinite(f):
        return None
    return int(f) if f.is_integer() and abs(f) < 2 ** 53 and not isinstance(v, float) else f


def values(seq):
    """value() of each of @seq; a numeric array at once (numpy's tolist), for speed."""
    kind = getattr(getattr(seq, "dtype", None), "kind", "O")
    if kind in "iubf":  # (a masked array's tolist() has None for what it masks)
        return [x if x is None or not isinstance(x, float) or math.isfinite(x) else None
                for x in seq.tolist()]
    return [value(v) for v in seq]


def rounded(v, digits=8):
    """@v to @digits significant digits (a pie's angles, a box's edges: float noise off)."""
    f = float(v)
    if not math.isfinite(f) or f == 0:
        return value(f)
    return round(f, digits - 1 - int(math.floor(math.log10(abs(f)))))


# ---- the kinds of chart ----

def kind_of(ax):
    """What @ax draws, from the classes of the artists put on it (text aside)."""
    from matplotlib.collections import PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import PathPatch, Rectangle, Wedge
    from matplotlib.text import Text
    artists = [a for a in getattr(ax, "_children", ax.get_children()) if not isinstance(a, Text)]
    if all(isinstance(a, Line2D) for a in artists):
        return "box_and_whisker" if outlined_boxes(ax) else "line"
    if all(isinstance(a, (PathPatch, Line2D)) for a in artists):
        return "box_and_whisker"
    artists = [a for a in artists if not (isinstance(a, Line2D) and is_rule(a))]
    for kind, cls in (("scatter", PathCollection), ("pie", Wedge), ("bar", Rectangle)):
        if all(isinstance(a, cls) for a in artists):
            return kind
    return "unknown"


def is_rule(line):
    """A horizontal or vertical line of two points (axhline, axvline): no data."""
    x, y = line.get_xdata(), line.get_ydata()
    return len(x) == 2 and len(y) == 2 and (x[0] == x[1] or y[0] == y[1])


def axes_chart(ax):
    kind = kind_of(ax)
    chart = {"type": kind, "title": text_or_none(ax.get_title()), "elements": []}
    if kind != "pie":
        chart.update(labels_2d(ax))
    MAKERS.get(kind, lambda ax, chart: None)(ax, chart)
    return chart


def labels_2d(ax):
    out = {}
    for axis, label in (("x", ax.get_xlabel()), ("y", ax.get_ylabel())):
        m = UNIT.search(label or "")
        out[axis + "_label"] = text_or_none(label)
        out[axis + "_unit"] = (m.group(1) or m.group(2)) if m else None
    return out


def scale_of(axis, scale):
    from matplotlib import category, dates
    conv = axis.get_converter() if hasattr(axis, "get_converter") else axis.converter
    if isinstance(conv, dates.DateConverter) or type(conv).__name__ == "_SwitchableDateConverter":
        return "datetime"
    if isinstance(conv, category.StrCategoryConverter):
        return "categorical"
    return scale


def ticks_of(ax, name):
    """Ticks, their labels and the scale of @ax's axis @name ("x" or "y")."""
    from matplotlib import dates
    axis = getattr(ax, name + "axis")
    scale = scale_of(axis, getattr(ax, "get_%sscale" % name)())
    locs = list(axis.get_ticklocs())
    labels = [t.get_text() for t in axis.get_ticklabels()]
    if locs and not any(labels):  # not drawn yet: the formatter's text
        labels = list(axis.get_major_formatter().format_ticks(locs))
    if scale == "datetime":
        ticks = [dates.num2date(t).isoformat() for t in locs]
    else:
        ticks = [value(t) for t in locs]
    return {name + "_ticks": ticks, name + "_tick_labels": labels, name + "_scale": scale}


def points_chart(ax, chart, series):
    for name in ("x", "y"):
        chart.update(ticks_of(ax, name))
    for label, xs, ys in series:
        points = [list(p) for p in zip(values(xs), values(ys))]
        chart["elements"].append({"label": label, "points": points})


def default_label(label, prefix, name):
    """matplotlib's "_child3" (no label given) as "Line 3"."""
    if label.startswith(prefix) and label[len(prefix):].isdigit():
        return "%s %s" % (name, label[len(prefix):])
    return label


def line_chart(ax, chart):
    points_chart(ax, chart, [(default_label(ln.get_label(), "_child", "Line"),
                              ln.get_xdata(orig=True), ln.get_ydata(orig=True))
                             for ln in ax.get_lines() if not is_rule(ln)])


def scatter_chart(ax, chart):
    series = []
    for c in ax.collections:
        offsets = c.get_offsets()
        series.append((default_label(c.get_label(), "_child", "Series"), offsets[:, 0], offsets[:, 1]))
    points_chart(ax, chart, series)


def tick_label_at(ax, name, pos):
    """What names the category at @pos of @ax's axis @name: its tick's label where the
    ticks are names (categories, labels the code gave, dates), else @pos as a number."""
    from matplotlib import ticker
    axis = getattr(ax, name + "axis")
    if not isinstance(axis.get_major_formatter(), (ticker.ScalarFormatter, ticker.LogFormatter)):
        for loc, t in zip(axis.get_ticklocs(), axis.get_ticklabels()):
            if abs(loc - pos) < 1e-9 * max(1.0, abs(pos)) + 1e-9 and t.get_text():
                return t.get_text()
    return "%g" % pos


def bar_chart(ax, chart):
    horizontal = False
    for i, c in enumerate(ax.containers):
        horizontal = getattr(c, "orientation", "vertical") == "horizontal"
        group = default_label(c.get_label(), "_container", "Group")
        for r in c:
            pos, size = ((r.get_y() + r.get_height() / 2, r.get_width()) if horizontal
                         else (r.get_x() + r.get_width() / 2, r.get_height()))
            chart["elements"].append({"label": tick_label_at(ax, "y" if horizontal else "x", pos),
                                      "group": group, "value": value(size)})
    if horizontal:  # x_label names the categories, as for upright bars
        for k in ("label", "unit"):
            chart["x_" + k], chart["y_" + k] = chart["y_" + k], chart["x_" + k]


def pie_chart(ax, chart):
    for w in ax.patches:
        chart["elements"].append({"label": w.get_label(), "angle": rounded(abs(w.theta2 - w.theta1)),
                                  "radius": value(w.r)})


def outline_of(line):
    """(x0, x1, y0, y1) of a line that draws a rectangle (a boxplot's box without
    patch_artist: five points, closed, axis-aligned), else None."""
    x, y = [float(v) for v in line.get_xdata()], [float(v) for v in line.get_ydata()]
    if len(x) != 5 or len(y) != 5 or (x[0], y[0]) != (x[4], y[4]) or len(set(x)) != 2 or len(set(y)) != 2:
        return None
    return min(x), max(x), min(y), max(y)


def outlined_boxes(ax):
    """The boxes of a boxplot drawn with lines only: rectangles, each crossed from side to
    side by a rule (its median), on an axes whose lines all lack labels. [] for any other."""
    lines = ax.get_lines()
    if not lines or any(not ln.get_label().startswith("_") for ln in lines):
        return []
    boxes = [b for b in map(outline_of, lines) if b]
    rules = [(sorted(map(float, ln.get_xdata())), sorted(map(float, ln.get_ydata())))
             for ln in lines if is_rule(ln)]
    return boxes if boxes and all(crossed(b, rules) for b in boxes) else []


def crossed(box, rules):
    x0, x1, y0, y1 = box
    return any((xs == [x0, x1] and ys[0] == ys[1]) or (ys == [y0, y1] and xs[0] == xs[1])
               for xs, ys in rules)


def is_upright(ax, boxes):
    """Whether @boxes stand on the x axis: boxplot() puts its positions as fixed ticks on the
    axis of the categories; else upright unless their heights are all one."""
    from matplotlib import ticker
    for name, up in (("x", True), ("y", False)):
        if isinstance(getattr(ax, name + "axis").get_major_locator(), ticker.FixedLocator):
            return up
    return not (len(boxes) > 1 and len({round(b[3] - b[2], 9) for b in boxes}) == 1)


def box_chart(ax, chart):
    """Boxes (patches with patch_artist=True, else rectangles drawn as lines) with their
    medians, whiskers and fliers, told apart by where each line lies."""
    boxes = []
    for p in ax.patches:
        v = p.get_path().vertices
        boxes.append((min(v[:, 0]), max(v[:, 0]), min(v[:, 1]), max(v[:, 1])))
    boxes = boxes or outlined_boxes(ax)
    upright = is_upright(ax, boxes)
    name = "x" if upright else "y"
    for b in boxes:
        lo, hi, q1, q3 = b if upright else (b[2], b[3], b[0], b[1])
        el = {"label": tick_label_at(ax, name, (lo + hi) / 2), "min": rounded(q1), "first_quartile": rounded(q1),
              "median": None, "third_quartile": rounded(q3), "max": rounded(q3), "outliers": []}
        box_lines(ax, el, lo, hi, q1, q3, upright)
        chart["elements"].append(el)
    if not upright:
        for k in ("label", "unit"):
            chart["x_" + k], chart["y_" + k] = chart["y_" + k], chart["x_" + k]


def box_lines(ax, el, lo, hi, q1, q3, upright):
    """A box's lines: fliers (markers only), its median (a rule across the whole box), its
    whiskers and caps (the rest: their far ends are min and max)."""
    eps = 1e-6 * max(1.0, abs(hi - lo))
    for ln in ax.get_lines():
        xs, ys = [float(v) for v in ln.get_xdata()], [float(v) for v in ln.get_ydata()]
        pos, vals = (xs, ys) if upright else (ys, xs)
        if not pos or not all(lo - eps <= p <= hi + eps for p in pos):
            continue
        if ln.get_linestyle() in ("None", "none", "", " "):
            el["outliers"] += [rounded(v) for v in vals]
        elif len(vals) == 2 and vals[0] == vals[1] and abs(min(pos) - lo) <= eps and abs(max(pos) - hi) <= eps:
            el["median"] = rounded(vals[0])
        elif vals:
            el["min"] = min(el["min"], rounded(min(vals)))
            el["max"] = max(el["max"], rounded(max(vals)))


MAKERS = {"line": line_chart, "scatter": scatter_chart, "bar": bar_chart, "pie": pie_chart,
          "box_and_whisker": box_chart}
