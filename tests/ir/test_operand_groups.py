"""``op.group(name)`` and ``op.slices()``: operands by the names their op declares, wherever the
attributes that size the groups put them; ``op.param_group(name, region)``: the region
parameters that receive them. An unknown name is an error naming the groups. A source scan
keeps passes from slicing operands by hand again."""

import ast
import textwrap
from pathlib import Path

import pytest

import minipallas as mp
from minipallas.ir import indexing
from minipallas.ir.core import Block, Function
from minipallas.ir.effects import region_operand_map
from minipallas.ir.opdef import OPS
from minipallas.ir.types import RefType

TEXT = textwrap.dedent("""
    func @f(%r: Ref{f32[8]}, %n: i32[], %x: f32[], %m: bool[4]) -> (f32[], i32[], f32[4], f32[]) {
      %zero = constant 0 : i32[]
      %sum = for %zero to %n (%r) iter (%x) {
      ^(%i: i32[], %rr: Ref{f32[8]}, %acc: f32[]):
        %v = get %rr[%i] : f32[]
        %acc2 = add %acc, %v : f32[]
        yield %acc2
      } : f32[]
      %count = while (%n) (%r) iter (%zero) cond {
      ^(%limit: i32[], %c: i32[]):
        %p = lt %c, %limit : bool[]
        yield %p
      } body {
      ^(%br: Ref{f32[8]}, %c: i32[]):
        %one = constant 1 : i32[]
        %c2 = add %c, %one : i32[]
        yield %c2
      } : i32[]
      %w = load %r[2:6], mask %m : f32[4]
      %pick = cond %n (%x, %r, %n) [{
      ^(%a: f32[], %ar: Ref{f32[8]}, %an: i32[]):
        yield %a
      }, {
      ^(%b: f32[], %brr: Ref{f32[8]}, %bn: i32[]):
        %g = get %brr[%bn] : f32[]
        yield %g
      }] : f32[]
      %s = run_scoped(%r, %n) {
      ^(%scratch: Ref{f32[8]}, %sr: Ref{f32[8]}, %sn: i32[]):
        %y = get %sr[ds(%sn, 4)] : f32[4]
        %old = swap %scratch[ds(%sn, 4)], %y : f32[4]
        %z = get %scratch[%sn] : f32[]
        addupdate %sr[%sn], %z
        yield %z
      } : f32[]
      return %sum, %count, %w, %s
    }
""")


def ops():
    fn = mp.parse(TEXT)
    return {op.name: op for op in fn.body.ops}, fn.body.params


def test_groups_of_region_ops():
    found, (r, n, x, _) = ops()
    loop = found["for"]
    assert loop.group("consts") == (r,) and loop.group("inits") == (x,)
    assert loop.group("upper") == (n,)
    assert loop.slices() == {"lower": slice(0, 1), "upper": slice(1, 2),
                             "consts": slice(2, 3), "inits": slice(3, 4)}  # fmt: skip
    w = found["while"]
    assert w.group("cond_consts") == (n,) and w.group("body_consts") == (r,)
    assert len(w.group("inits")) == 1
    assert found["cond"].group("index") == (n,) and found["cond"].group("args") == (x, r, n)
    assert found["run_scoped"].group("args") == (r, n)


def test_region_parameters_line_up_with_the_groups_they_receive():
    found, _ = ops()
    loop = found["for"]
    (body,) = loop.regions
    assert loop.param_group("index") == body.params[:1]
    assert loop.param_group("consts") == body.params[1:2]
    assert loop.param_group("inits") == body.params[2:]
    w = found["while"]
    assert w.param_group("cond_consts", region=0) == w.regions[0].params[:1]
    assert w.param_group("body_consts", region=1) == w.regions[1].params[:1]
    assert w.param_group("inits", region=1) == w.regions[1].params[1:]
    for k, branch in enumerate(found["cond"].regions):  # one declaration serves every branch
        assert found["cond"].param_group("args", region=k) == branch.params
    scoped = found["run_scoped"]
    (scratch,) = scoped.param_group("allocs")
    assert scratch is scoped.regions[0].params[0] and isinstance(scratch.type, RefType)
    assert scoped.param_group("args") == scoped.regions[0].params[1:]


def test_each_region_parameter_has_the_type_of_the_operand_it_receives():
    found, _ = ops()
    for op in found.values():
        operands = op.slices()
        for r in range(len(op.regions)):
            for name, where in op.param_slices(r).items():
                params = op.regions[r].params[where]
                if name in operands:
                    assert [p.type for p in params] == [v.type for v in op.group(name)], name
                else:  # a parameter of the region's own: for's index, the scope's allocations
                    assert name in ("index", "allocs") and params


def test_the_effects_region_map_follows_the_declaration():
    """Consts and arguments hold their operands; carries, indices and allocations do not."""
    found, _ = ops()
    assert region_operand_map(found["for"], 0) == {1: 2}
    assert region_operand_map(found["while"], 0) == {0: 0}
    assert region_operand_map(found["while"], 1) == {0: 1}
    assert region_operand_map(found["cond"], 1) == {0: 1, 1: 2, 2: 3}
    assert region_operand_map(found["run_scoped"], 0) == {1: 0, 2: 1}


def test_indexer_ops_group_their_dynamic_indices():
    """For every op with an indexer, ``indices`` are the indexer's dynamic values, and the
    groups cover the operands in order, each once."""
    fn = mp.parse(TEXT)
    indexed = [op for op in fn.body.walk() if "indexer" in op.attrs]
    assert {op.name for op in indexed} == {"get", "load", "swap", "addupdate"}
    for op in indexed:
        assert len(op.group("indices")) == indexing.num_dyn(op.attrs["indexer"])
        assert op.group("indices") == op.operands[1 : 1 + indexing.num_dyn(op.attrs["indexer"])]
    for op in fn.body.walk():
        covered = [k for where in op.slices().values() for k in range(where.start, where.stop)]
        assert covered == list(range(len(op.operands))), op.name


def test_flagged_operands_are_present_only_when_set():
    found, (r, _, _, m) = ops()
    load = found["load"]
    assert load.group("ref") == (r,) and load.group("mask") == (m,)
    assert load.group("other") == ()


def test_groups_are_cached_per_sizing_attributes():
    """Two ``for`` ops of as many operands but other ``num_consts`` get their own groups."""
    opdef = OPS["for"]
    assert opdef.groups(4, {"num_consts": 1})["consts"] == slice(2, 3)
    assert opdef.groups(4, {"num_consts": 2})["consts"] == slice(2, 4)
    assert opdef.groups(4, {"num_consts": 0})["consts"] == slice(2, 2)
    assert opdef.groups(4, {"num_consts": 3}) is None  # more consts than operands
    assert opdef.groups(4, {}) is None  # no count: does not fit
    assert opdef.groups(4, {"num_consts": 1}) is opdef.groups(4, {"num_consts": 1})


def test_an_unknown_group_names_the_known_ones():
    found, _ = ops()
    with pytest.raises(mp.MiniPallasError, match="has no operand group 'carries'") as e:
        found["for"].group("carries")
    assert "its groups: lower, upper, consts, inits" in str(e.value)
    with pytest.raises(mp.MiniPallasError, match="no region 1 parameter group 'cond_consts'"):
        found["while"].param_group("cond_consts", region=1)  # the condition's, region 0
    with pytest.raises(mp.MiniPallasError, match="no region 0 parameter group 'carries'") as e:
        found["for"].param_group("carries")
    assert "its groups: index, consts, inits" in str(e.value)


def test_an_op_whose_operands_do_not_fit_prints_them_as_they_are():
    """Syntax rules read operands by group, so the printer shows such an op generically."""
    fn = mp.parse(TEXT)
    loop = next(op for op in fn.body.ops if op.name == "for")
    bad = loop.replace(attrs={"num_consts": 5})
    ops_ = tuple(bad if op is loop else op for op in fn.body.ops)
    results = tuple(bad.result if v is loop.result else v for v in fn.body.results)
    text = str(Function("g", Block(fn.body.params, ops_, results)))
    assert "= for (%4, %1, %0, %2) {num_consts = 5} {" in text


# --- no hand slicing -----------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("ir", "passes", "lowering", "minipallas")
RECEIVERS = {"operands", "params", "args", "ins"}  # an op's operands, region parameters, and
# the values rules get lined up with the operands (interpreter ``args``, batching ``ins``)
SOURCES = {"attrs", "num_dyn"}  # where group sizes come from: ``num_consts``, the indexer
ALLOWED = {  # not an operand group
    ("ir/interpret/rules/sorting.py", "op.operands[:n]"): "sort's keys: the first num_keys arrays",
}


def _mentions(node: ast.AST, names: set[str]) -> bool:
    return any(
        (isinstance(n, ast.Name) and n.id in names)
        or (isinstance(n, ast.Attribute) and n.attr in names)
        for n in ast.walk(node)
    )


def _assignments(fn: ast.AST):
    """(target, value) pairs of a function's assignments, ``a, b = x, y`` taken pairwise."""
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign):
            pairs = [(t, n.value) for t in n.targets]
        elif isinstance(n, (ast.AnnAssign, ast.AugAssign)) and n.value is not None:
            pairs = [(n.target, n.value)]
        else:
            continue
        for target, value in pairs:
            if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                if len(target.elts) == len(value.elts):
                    yield from zip(target.elts, value.elts, strict=True)
                    continue
            yield target, value


def hand_slices(source: str):
    """Slices ``R[a:b]`` with ``R`` one of ``RECEIVERS`` (a name or an attribute) and a bound
    that mentions ``attrs`` or ``num_dyn``, or a name the same function assigned from one
    (transitively): ``op.operands[2 : 2 + n]`` after ``n = op.attrs["num_consts"]``."""
    tree = ast.parse(source)
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        derived = set(SOURCES)
        grown = True
        while grown:
            before = len(derived)
            for target, value in _assignments(fn):
                if _mentions(value, derived):
                    derived |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
            grown = len(derived) > before
        for n in ast.walk(fn):
            if not (isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Slice)):
                continue
            receiver = getattr(n.value, "attr", getattr(n.value, "id", None))
            bounds = [b for b in (n.slice.lower, n.slice.upper) if b is not None]
            if receiver in RECEIVERS and any(_mentions(b, derived) for b in bounds):
                yield n.lineno, ast.unparse(n)


def test_the_scan_finds_hand_slicing():
    source = textwrap.dedent("""
        def rule(op, args):
            n = op.attrs["num_consts"]
            consts = args[2 : 2 + n]
            k = 1 + n
            return op.regions[0].params[k:], op.operands[: op.attrs["cond_nconsts"]]

        def indexed(op):
            dyn, indexer = len(x), op.attrs["indexer"]
            return op.operands[1 : 1 + num_dyn(indexer)], op.operands[1 : 1 + dyn]
    """)
    assert [text for _, text in hand_slices(source)] == [
        "args[2:2 + n]", "op.regions[0].params[k:]", "op.operands[:op.attrs['cond_nconsts']]",
        "op.operands[1:1 + num_dyn(indexer)]",
    ]  # fmt: skip


def test_no_pass_slices_operands_by_hand():
    """Operand groups are read by name (``op.group``, ``op.slices``, ``op.param_group``), not
    cut at offsets computed from the attributes. Type rules (which check the sizes; they get
    ``types``) and lists unrelated to an op (a kernel's inputs) are out of the scan's reach."""
    found = set()
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            found |= {(rel, text, line) for line, text in hand_slices(path.read_text())}
    unexplained = sorted(f"{rel}:{line}: {text}" for rel, text, line in found
                         if (rel, text) not in ALLOWED)  # fmt: skip
    assert not unexplained, "read these by group name:\n" + "\n".join(unexplained)
    assert {(rel, text) for rel, text, _ in found} >= set(ALLOWED), "ALLOWED is stale"
