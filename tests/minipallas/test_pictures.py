"""``minipallas.view``: pictures of the IR as DOT text, rendered by Graphviz's ``dot``.

The DOT text is checked with FileCheck (here and in ``filecheck/view.mir``); rendering is
checked with a stand-in ``dot`` on PATH (this machine has no Graphviz programs), and with the
real one where it is installed.
"""

import os
import pathlib
import re
import shutil
import stat
import subprocess
import sys
import textwrap

import pytest
from filecheck_util import filecheck

import minipallas as mp
from minipallas.cli import main
from minipallas.ir.printer import print_function
from minipallas.passes import pipeline
from minipallas.pictures import PassPictures, draw

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"

LOOPS = textwrap.dedent("""
    func @bump(%r: Ref{f32[8]}, %v: f32[8]) -> () {
      addupdate %r[:], %v
      return
    }

    func @loops(%a: Ref{f32[8]}, %n: i32[], %k: i32[]) -> (f32[8]) {
      %zero = constant 0 : i32[]
      %init = constant 0.0 : f32[8]
      %s = for %zero to %n (%a) iter (%init) {
      ^(%i: i32[], %ra: Ref{f32[8]}, %c: f32[8]):
        %v = get %ra[:] : f32[8]
        %w = add %c, %v : f32[8]
        store %ra[:], %w
        yield %w
      } : f32[8]
      %p = cond %k (%s) [{
      ^(%x: f32[8]):
        yield %x
      }, {
      ^(%x: f32[8]):
        %y = neg %x : f32[8]
        yield %y
      }] : f32[8]
      call @bump(%a, %p)
      return %p
    }
""").lstrip()


@pytest.fixture
def loops():
    return mp.parse_module(LOOPS).entry


def _labels(dot: str) -> set[str]:
    return {m.replace('\\"', '"') for m in re.findall(r'label="((?:[^"\\]|\\.)*)"', dot)}


def test_each_op_is_a_node_labelled_with_its_line_of_text_ir(loops):
    labels = _labels(mp.view(loops, format="dot"))
    lines = [line.strip() for line in print_function(loops).splitlines()]
    ops = [
        line
        for line in lines
        if line and not line.startswith(("func", "return", "yield", "^(", "}")) and "{" not in line
    ]
    assert len(ops) == 8  # two constants, get, add, store, neg, call; addupdate in @bump
    assert set(ops) <= labels
    # a region op's line, its regions shown as {…}
    assert "%5 = for %3 to %1 (%0) iter (%4) {…} : f32[8]" in labels
    assert "%11 = cond %2 (%5) [{…}, {…}] : f32[8]" in labels


def test_regions_calls_and_effects(loops):
    filecheck(
        mp.view(loops, format="dot"),
        """
        CHECK:      subgraph [[BUMP:cluster_n[0-9]+]] {
        CHECK-NEXT:   label="func @bump effects {accum 0}"
        CHECK-NEXT:   [[BUMPR:n[0-9]+]] [label="%0: Ref{f32[8]}" fillcolor="#a1d99b" style=filled]
        CHECK:      label="func @loops effects {read 0, write 0, accum 0}"
        The ref is read, written and accumulated into: three stripes.
        CHECK-NEXT: [[A:n[0-9]+]] [label="%0: Ref{f32[8]}"
        CHECK-SAME:   fillcolor="#9ecae1:#fc9272:#a1d99b" style=striped]
        CHECK:      subgraph cluster_[[FOR:n[0-9]+]] {
        CHECK:        label="loop body"
        CHECK-NEXT:   [[I:n[0-9]+]] [label="%6: i32[]" shape=ellipse]
        The loop reads and writes its view of the ref, the call accumulates into it.
        CHECK-NEXT:   [[RA:n[0-9]+]] [label="%7: Ref{f32[8]}"
        CHECK-SAME:     fillcolor="#9ecae1:#fc9272" style=striped]
        CHECK:        label="branch 0"
        CHECK:        label="branch 1"
        CHECK:      [[CALL:n[0-9]+]] [label="call @bump(%0, %11)" tooltip="loc(24:3)"]
        CHECK:      [[A]] -> [[FOR]] [label="%0" color="#9ecae1:#fc9272" penwidth=2]
        CHECK:      [[FOR]] -> [[RA]] [label="%0" style=dashed]
        CHECK:      [[A]] -> [[CALL]] [label="%0" color="#a1d99b" penwidth=2]
        CHECK:      [[CALL]] -> {{n[0-9]+}} [label=calls lhead=[[BUMP]] style=dotted]
        """,
    )


def test_before_and_after_are_two_clusters_with_their_own_nodes(loops):
    after = mp.discharge(loops)
    dot = mp.view(after, format="dot", before=loops, title="discharge")
    filecheck(
        dot,
        """
        CHECK:     label=discharge
        CHECK:     subgraph cluster_before {
        CHECK:       label="func @loops effects {read 0, write 0, accum 0}"
        CHECK:     subgraph cluster_after {
        CHECK-NOT:   effects {
        CHECK:       label="func @loops"
        CHECK:     subgraph cluster_legend {
        """,
    )
    nodes = re.findall(r"^\t+([abl]\w*|[^\sabl]\w*) \[label=", dot, re.MULTILINE)
    assert len(nodes) == len(set(nodes)) > 40
    assert {n[0] for n in nodes} == {"b", "a", "l"}  # before, after, legend


def test_pictures_after_each_pass_go_side_by_side(loops):
    seen = []
    hook = PassPictures(loops, lambda graph, step: seen.append((step, graph.source)))
    final = pipeline.run(loops, "discharge,cleanup", after_each=hook)
    assert [step for step, _ in seen] == ["1-discharge", "2-cleanup"]
    assert 'label="pass 2: cleanup"' in seen[1][1]
    assert seen[1][1] == draw(final, before=mp.discharge(loops), title="pass 2: cleanup").source


def test_an_unwritable_path_is_a_minipallas_error(loops, tmp_path):
    with pytest.raises(mp.MiniPallasError, match="cannot write the picture to") as info:
        mp.view(loops, format="dot", path=tmp_path / "missing" / "loops.dot")
    assert "folder that exists" in info.value.fix


def test_unknown_format_names_the_known_ones(loops):
    with pytest.raises(mp.MiniPallasError, match="unknown picture format 'pdf'") as info:
        mp.view(loops, format="pdf")
    assert info.value.fix == "choose one of dot, svg, png"


def test_svg_without_graphviz_says_how_to_get_it(loops, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no `dot` there
    with pytest.raises(mp.MiniPallasError, match="Graphviz's `dot` program") as info:
        mp.view(loops, format="svg")
    assert "apt-get install graphviz" in info.value.fix
    assert "format='dot'" in info.value.fix and "--view=dot" in info.value.fix
    assert mp.view(loops, format="dot").startswith("digraph loops {")  # dot text still works


def _fake_dot(folder, body: str) -> None:
    """A stand-in ``dot`` on PATH: graphviz runs ``dot -Kdot -T<format>`` on the DOT text."""
    path = folder / "dot"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def fake_dot(tmp_path, monkeypatch):
    tools = tmp_path / "tools"
    tools.mkdir()
    # echo the format it was asked for and the DOT it read, so the test sees both arrived
    _fake_dot(tools, 'for a in "$@"; do fmt="$a"; done; echo "<svg>$fmt"; grep -c -- "->" -')
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    return tools


def test_rendering_pipes_the_dot_text_through_graphviz(loops, fake_dot, tmp_path):
    edges = mp.view(loops, format="dot").count(" -> ")
    svg = mp.view(loops, format="svg", path=tmp_path / "loops.svg")
    assert svg == f"<svg>-Tsvg\n{edges}\n"
    assert (tmp_path / "loops.svg").read_text() == svg
    png = mp.view(loops, format="png")
    assert png == f"<svg>-Tpng\n{edges}\n".encode()


def test_a_failing_dot_is_a_minipallas_error(loops, tmp_path, monkeypatch):
    _fake_dot(tmp_path, "echo 'syntax error in line 3' >&2; exit 1")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(mp.MiniPallasError, match="syntax error in line 3"):
        mp.view(loops, format="svg")


def test_cli_writes_one_picture_per_pass_and_the_final_one(fake_dot, tmp_path, capsys):
    source = tmp_path / "loops.mir"
    source.write_text(LOOPS)
    argv = [str(source), "--pass-pipeline=discharge,cleanup", "--view=svg", "--view-after-all"]
    assert main(argv) == 0
    names = ["loops.1-discharge.svg", "loops.2-cleanup.svg", "loops.svg"]
    assert capsys.readouterr().out.splitlines() == [f"// picture: {tmp_path / n}" for n in names]
    assert all((tmp_path / n).read_text().startswith("<svg>-Tsvg") for n in names)


def test_cli_numbers_the_pictures_of_split_input(fake_dot, tmp_path, capsys):
    source = tmp_path / "two.mir"
    source.write_text(LOOPS + "\n// -----\n" + LOOPS)
    assert main([str(source), "--split-input-file", "--view=png"]) == 0
    assert (tmp_path / "two.1.png").is_file() and (tmp_path / "two.2.png").is_file()


def test_cli_view_without_graphviz_fails_with_the_fix(tmp_path, monkeypatch, capsys):
    source = tmp_path / "loops.mir"
    source.write_text(LOOPS)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main([str(source), "--view=png"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "apt-get install graphviz" in err
    assert not (tmp_path / "loops.png").exists()


def test_cli_view_does_not_go_with_emit(tmp_path, capsys):
    source = tmp_path / "loops.mir"
    source.write_text(LOOPS)
    assert main([str(source), "--view=dot", "--emit=stablehlo"]) == 2
    assert "--view draws minipallas IR" in capsys.readouterr().err


def test_view_is_the_function_even_once_its_module_is_imported():
    import minipallas.pictures  # noqa: F401 - what a submodule named `view` would break

    assert callable(mp.view) and mp.view.__module__ == "minipallas.pictures"


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_real_graphviz_renders_the_picture(loops):
    svg = mp.view(mp.discharge(loops), format="svg", before=loops, title="discharge")
    assert svg.lstrip().startswith("<?xml") and "</svg>" in svg
    assert "loop body" in svg and "func @bump" in svg
    assert mp.view(loops, format="png")[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_discharge_example_shows_its_picture():
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "ch04_discharge.py")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    picture = done.stdout.split("--- picture: ")[1].split("--- cleaned")[0]
    filecheck(
        picture,
        """
        CHECK:      {{[0-9]+}} arrows; coloured refs, all before discharge ---
        x is read, acc read and accumulated into, out written:
        CHECK-NEXT: b2 [label="%0: Ref{f32[4,8]}" fillcolor="#9ecae1" style=filled]
        CHECK-NEXT: b3 [label="%1: Ref{f32[2,8]}" fillcolor="#9ecae1:#a1d99b" style=striped]
        CHECK-NEXT: b4 [label="%2: Ref{f32[8]}" fillcolor="#fc9272" style=filled]
        CHECK-NOT:  a{{[0-9]+}} [
        """,
    )


def _kernel_call():
    def add(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]

    f32 = mp.ArrayType((64, 256), "float32")
    spec = mp.BlockSpec((8, 128), lambda i, j: (i, j))
    call = mp.pallas_call(add, f32, grid=(8, 2), in_specs=[spec, spec], out_specs=spec)
    return call, (f32, f32)


def test_a_kernel_is_drawn_with_its_grid_and_index_maps():
    call, inputs = _kernel_call()
    dot = mp.view(call.trace(*inputs), "dot")
    assert "kernel add, grid (8, 2)" in dot
    for name in ("add_input0_index_map", "add_input1_index_map", "add_output0_index_map"):
        assert f"func @{name}" in dot
    assert "swap %2[:, :], %5 : f32[8,128]" in dot  # the body's own lines
    assert mp.view(call, "dot", inputs=inputs) == dot


def test_a_pallas_call_without_inputs_says_how_to_give_them():
    call, _ = _kernel_call()
    with pytest.raises(mp.MiniPallasError, match="needs its inputs' shapes") as e:
        mp.view(call, "dot")
    assert "inputs=" in str(e.value)
    with pytest.raises(mp.MiniPallasError, match="cannot draw a str"):
        mp.view("func @f", "dot")
