"""Pictures of the IR, drawn with Graphviz: to see what a program does and what a pass changed.

- Each op is a node labelled with its line of text IR, with the printer's own value names, so
  a picture and ``print(fn)`` read alike; each SSA edge is an arrow from the value's definition
  to a use, labelled with the value's name.
- Each function is a cluster; a region op is a cluster holding its header node and one cluster
  per region (loop body, branch, ``run_scoped`` body), whose parameters are nodes. Dashed arrows
  show which operands the op hands to its region's parameters; the op's results leave its box.
- Refs, the ops that touch them and the arrows through which they do are coloured by the
  effects analysis (``ir.effects``, what ``--print-effects`` prints): read blue, write red,
  accum green, several kinds striped. A ``swap`` is a write, as upstream's.
- A ``run_scoped`` body is its allocations' lifetime: a yellow box, named after them, holding
  exactly the ops during which they exist.

``graphviz`` (the Python package) writes the DOT text; rendering it to svg or png runs the
Graphviz program ``dot``, which only those formats need. (The module is not named ``view``:
importing ``minipallas.view`` would shadow the function ``minipallas.view`` with the module.)
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterable

import graphviz

from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.effects import Effect, EffectsAnalysis, region_operand_map
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.kernel_spec import Kernel
from minipallas.ir.opdef import ACCUM, OPS, READ, WRITE, EffectKind
from minipallas.ir.printer import Printer, effects_text, location_text
from minipallas.ir.types import RefType
from minipallas.kernels.pallas_call import PallasCall

FORMATS = ("dot", "svg", "png")
COLOURS = {READ: "#9ecae1", WRITE: "#fc9272", ACCUM: "#a1d99b"}  # blue, red, green
SCOPE_COLOUR = "#fff7bc"  # a run_scoped body: the lifetime of its allocations
MAX_LABEL = 90  # longer op lines (big constants) are cut, with an ellipsis
INSTALL = (
    "install the Graphviz programs (Debian/Ubuntu: `apt-get install graphviz`; macOS: "
    "`brew install graphviz`), or ask for format='dot' (minipallas-opt --view=dot), which "
    "needs no Graphviz program: its text renders with `dot -Tsvg` anywhere Graphviz is"
)


def view(
    fn: Function | Kernel | PallasCall,
    format: str = "svg",
    *,
    before: Function | None = None,
    title: str | None = None,
    path: str | pathlib.Path | None = None,
    inputs: tuple | None = None,
) -> str | bytes:
    """A picture of ``fn``: DOT text (``"dot"``), svg text or png bytes; written to ``path``
    too when given. With ``before``, the two programs side by side: what a pass did.

    A traced ``Kernel`` is drawn as its body beside its index maps, titled with its grid; a
    ``pallas_call`` is traced first, for ``inputs`` (arrays or ``ArrayType`` objects).
    """
    return render(draw(fn, before=before, title=title, inputs=inputs), format, path)


def draw(
    fn: Function | Kernel | PallasCall,
    *,
    before: Function | None = None,
    title: str | None = None,
    inputs: tuple | None = None,
) -> graphviz.Digraph:
    """The ``graphviz.Digraph`` of ``fn`` (and ``before`` beside it), for further styling."""
    kernel = _kernel(fn, inputs)
    if kernel is not None:
        return _draw_kernel(kernel, title)
    if not isinstance(fn, Function):
        raise MiniPallasError(
            f"cannot draw a {type(fn).__name__}",
            fix="give a Function (mp.trace, mp.parse), a traced Kernel (call.trace(*inputs)) "
            "or a pallas_call with inputs=",
        )
    graph = graphviz.Digraph(
        fn.name,
        graph_attr={"compound": "true", "fontname": "monospace", "labelloc": "t"},
        node_attr={"fontname": "monospace", "fontsize": "10", "shape": "box"},
        edge_attr={"fontname": "monospace", "fontsize": "9"},
    )
    if title:
        graph.attr(label=title)
    if before is None:
        drawer = _Drawer(graph, "n", graph)
        drawer.program(fn)
        drawer.arrows()
    else:
        for side, program in (("before", before), ("after", fn)):
            with graph.subgraph(name=f"cluster_{side}") as half:
                half.attr(label=side, style="dashed")
                drawer = _Drawer(graph, side[0], half)
                drawer.program(program)
            drawer.arrows()
    _legend(graph)
    return graph


def _kernel(fn: object, inputs: tuple | None) -> Kernel | None:
    """The kernel to draw: ``fn`` itself, or the ``pallas_call`` ``fn`` traced for ``inputs``."""
    if isinstance(fn, Kernel):
        return fn
    if not isinstance(fn, PallasCall):
        return None
    if inputs is None:
        raise MiniPallasError(
            f"drawing {fn!r} traces it, which needs its inputs' shapes and dtypes",
            fix="mp.view(call, inputs=(x, y)) with arrays or mp.ArrayType(shape, dtype)s, or "
            "mp.view(call.trace(x, y))",
        )
    return fn.trace(*inputs)


def _draw_kernel(kernel: Kernel, title: str | None) -> graphviz.Digraph:
    """The kernel body, then each operand's index map (grid indices -> block indices)."""
    graph = draw(kernel.body, title=title or f"kernel {kernel.name}, grid {kernel.grid}")
    drawer = _Drawer(graph, "m", graph)
    for spec in (*kernel.in_specs, *kernel.out_specs):
        drawer.program(spec.index_map)
    drawer.arrows()
    return graph


def render(
    graph: graphviz.Digraph, format: str, path: str | pathlib.Path | None = None
) -> str | bytes:
    """``graph`` in ``format`` (one of ``FORMATS``), also written to ``path`` when given."""
    if format not in FORMATS:
        raise MiniPallasError(
            f"unknown picture format '{format}'", fix=f"choose one of {', '.join(FORMATS)}"
        )
    if format == "dot":
        data: str | bytes = graph.source
    else:
        try:
            data = graph.pipe(format=format)
        except graphviz.ExecutableNotFound:
            raise MiniPallasError(
                f"rendering a picture as {format} runs Graphviz's `dot` program, which is not "
                "installed (not on PATH)",
                fix=INSTALL,
            ) from None
        except graphviz.CalledProcessError as e:
            raise MiniPallasError(
                f"Graphviz's `dot` failed to render the picture as {format}: "
                f"{(e.stderr or b'').decode(errors='replace').strip()}",
                fix="render the DOT text (format='dot') with `dot` by hand to see the problem",
            ) from None
        if format == "svg":
            data = data.decode()
    if path is not None:
        try:
            with open(path, "wb" if isinstance(data, bytes) else "w") as file:
                file.write(data)
        except OSError as e:
            raise MiniPallasError(
                f"cannot write the picture to {path}: {e.strerror}",
                fix="give a path in a folder that exists and can be written",
            ) from None
    return data


class PassPictures:
    """An ``after_each`` hook (``passes.pipeline.run``, ``lowering.AfterEach``) that draws,
    after each pass, the function before and after it side by side: ``--view-after-all``.

    ``emit(graph, step)`` receives each picture and its step name, ``"1-discharge"``...
    """

    def __init__(self, fn: Function, emit: Callable[[graphviz.Digraph, str], None]) -> None:
        self.before = fn
        self.emit = emit
        self.step = 0

    def __call__(self, pass_name: str, fn: Function) -> None:
        self.step += 1
        title = f"pass {self.step}: {pass_name}"
        self.emit(draw(fn, before=self.before, title=title), f"{self.step}-{pass_name}")
        self.before = fn


def emitter(format: str, stem: str) -> Callable[[graphviz.Digraph, str | None], None]:
    """What ``minipallas-opt --view`` does with a picture: DOT text goes to stdout (pictures one
    after another, which ``dot -Tsvg -O`` renders one file each); svg and png are written to
    ``STEM.svg`` (``STEM.1-discharge.svg`` for a pass's step), whose path is printed."""

    def emit(graph: graphviz.Digraph, step: str | None = None) -> None:
        if format == "dot":
            print(render(graph, format), end="")
            return
        path = f"{stem}.{step}.{format}" if step else f"{stem}.{format}"
        render(graph, format, path)
        print(f"// picture: {path}")

    return emit


def _legend(graph: graphviz.Digraph) -> None:
    with graph.subgraph(name="cluster_legend") as legend:
        legend.attr(label="effects", style="dotted")
        with legend.subgraph() as row:  # one row, in this order
            row.attr(rank="same")
            for kind, colour in COLOURS.items():
                row.node(f"legend_{kind}", str(kind), style="filled", fillcolor=colour)
            row.edge("legend_read", "legend_write", style="invis")
            row.edge("legend_write", "legend_accum", style="invis")


def _kinds(effects: Iterable[Effect]) -> dict[int, list[EffectKind]]:
    """Position -> its effect kinds, in read, write, accum order."""
    found: dict[int, list[EffectKind]] = {}
    for eff in sorted(effects):
        found.setdefault(eff.input, []).append(eff.kind)
    return found


def _fill(kinds: list[EffectKind]) -> dict[str, str]:
    """Node attributes that colour it by ``kinds``: one fill, or stripes for several."""
    if not kinds:
        return {}
    style = "striped" if len(kinds) > 1 else "filled"  # "filled" with two colours: a gradient
    return {"style": style, "fillcolor": ":".join(COLOURS[k] for k in kinds)}


class _Drawer:
    """Draws functions into ``where`` (the graph or one of its clusters); node ids start with
    ``prefix``. Edges all go to the root ``graph``: in DOT an edge written inside a cluster
    would pull both its ends into that cluster."""

    def __init__(self, graph: graphviz.Digraph, prefix: str, where: graphviz.Digraph) -> None:
        self.graph = graph
        self.where = where
        self.prefix = prefix
        self.count = 0
        self.analysis = EffectsAnalysis()
        self.source: dict[Value, tuple[str, str | None]] = {}  # value -> (node, its op's cluster)
        self.functions: dict[int, tuple[str, str]] = {}  # id(fn) -> (a node, its cluster)
        self.printer = Printer()
        self.edges: list[tuple[str, str, dict[str, str]]] = []

    def program(self, fn: Function) -> None:
        """Draws ``fn`` and its callees, keeping their edges for ``arrows``."""
        for f in (*fn.callees(), fn):
            self.function(f)

    def arrows(self) -> None:
        """Writes the edges, after the nodes and clusters they join: easier to read."""
        for tail, head, attrs in self.edges:
            self.graph.edge(tail, head, **attrs)

    def fresh(self) -> str:
        self.count += 1
        return f"{self.prefix}{self.count}"

    def function(self, fn: Function) -> None:
        self.printer = Printer()
        self.printer.function(fn)  # names every value as print(fn) does
        found = self.analysis.function(fn)
        cluster = f"cluster_{self.fresh()}"
        with self.where.subgraph(name=cluster) as box:
            header = f"func @{fn.name}" + (f" effects {effects_text(found)}" if found else "")
            box.attr(label=header, style="rounded")
            self.functions[id(fn)] = (self.block(box, fn.body, found, "return"), cluster)

    def block(
        self,
        box: graphviz.Digraph,
        block: Block,
        found: Iterable[Effect],
        end: str,
        scoped: int = 0,
    ) -> str:
        """Draws the parameters, ops and yielded values of ``block`` into ``box``; the first
        ``scoped`` parameters are scoped allocations. Returns the id of its closing node."""
        at = _kinds(found)
        for k, param in enumerate(block.params):
            self.param(box, param, at.get(k, []), scoped=k < scoped)
        for op in block.ops:
            self.op(box, op)
        names = self.printer.values(block.results)
        close = self.fresh()
        box.node(close, f"{end} {names}".rstrip(), shape="plaintext")
        for value in block.results:
            self.arrow(value, close)
        return close

    def param(
        self, box: graphviz.Digraph, value: Value, kinds: list[EffectKind], scoped: bool
    ) -> None:
        node = self.fresh()
        label = f"{self.printer.value(value)}: {value.type}"
        if scoped:
            box.node(node, f"scoped {label}", peripheries="2", **_fill(kinds))
        elif isinstance(value.type, RefType):
            box.node(node, label, **_fill(kinds))
        else:
            box.node(node, label, shape="ellipse")
        self.source[value] = (node, None)

    def op(self, box: graphviz.Digraph, op: Op) -> None:
        node = self.fresh()
        label = self.line(op)
        at = _kinds(self.analysis.op(op))
        where = location_text(op.loc)
        if not op.regions:
            effects = [kind for kind, _ in OPS[op.name].effects]
            box.node(node, label, tooltip=where, **_fill(effects))
            self.uses(op, node, at)
            if op.name == "call" and id(op.attrs["callee"]) in self.functions:
                callee, cluster = self.functions[id(op.attrs["callee"])]
                calls = {"style": "dotted", "label": "calls", "lhead": cluster}
                self.edges.append((node, callee, calls))
            self.source.update((r, (node, None)) for r in op.results)
            return
        cluster = f"cluster_{node}"
        with box.subgraph(name=cluster) as outer:
            outer.attr(label="", style="rounded,filled", fillcolor="#f4f4f4")
            outer.node(node, label, tooltip=where, style="bold,filled", fillcolor="white")
            self.uses(op, node, at)
            for r, region in enumerate(op.regions):
                self.region(outer, op, r, region, node)
        self.source.update((r, (node, cluster)) for r in op.results)

    def region(self, outer: graphviz.Digraph, op: Op, r: int, region: Block, head: str) -> None:
        scoped = op.param_group("allocs") if op.name == "run_scoped" else ()
        with outer.subgraph(name=f"cluster_{self.fresh()}") as box:
            if scoped:
                allocs = self.printer.values(scoped)
                lifetime = sum(1 for _ in region.walk())
                box.attr(
                    label=f"scope of {allocs}: lives during these {lifetime} ops",
                    style="filled",
                    fillcolor=SCOPE_COLOUR,
                )
            else:
                box.attr(label=_region_title(op, r), style="rounded,filled", fillcolor="white")
            self.block(box, region, self.analysis.block(region), "yield", len(scoped))
        for param, operand in region_operand_map(op, r).items():
            target, _ = self.source[region.params[param]]
            name = self.printer.value(op.operands[operand])
            self.edges.append((head, target, {"label": name, "style": "dashed"}))

    def uses(self, op: Op, node: str, at: dict[int, list[EffectKind]]) -> None:
        for k, value in enumerate(op.operands):
            self.arrow(value, node, at.get(k, []))

    def arrow(self, value: Value, node: str, kinds: Iterable[EffectKind] = ()) -> None:
        """The SSA edge from ``value``'s definition to ``node``, coloured by ``kinds``."""
        source, cluster = self.source[value]
        attrs = {"label": self.printer.value(value)}
        if cluster:
            attrs["ltail"] = cluster
        if colours := ":".join(COLOURS[k] for k in kinds):
            attrs.update(color=colours, penwidth="2")
        self.edges.append((source, node, attrs))

    def line(self, op: Op) -> str:
        """The op's line of text IR, ``{…}`` in place of each region."""
        parts = OPS[op.name].syntax.print(self.printer, op)
        body = "".join("{…}" if isinstance(p, Block) else p for p in parts)
        results = self.printer.values(op.results)
        types = ", ".join(str(r.type) for r in op.results)
        text = f"{results} = {op.name}" if results else op.name
        text += f"{body} : {types}" if types else body
        return text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"


def _region_title(op: Op, r: int) -> str:
    if op.name == "for":
        return "loop body"
    if op.name == "while":
        return ("while: condition", "while: body")[r]
    if op.name == "cond":
        return f"branch {r}"
    return f"{op.name}: region {r}"
