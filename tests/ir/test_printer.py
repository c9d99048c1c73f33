"""The printer's output, checked with FileCheck patterns (captured names, not fixed numbers,
except where the numbering itself is the point)."""

import re

import pytest
import textir_programs as programs
from filecheck_util import filecheck

from minipallas.ir import Block, Builder, Function, Location, Op, Value, params
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.printer import print_function


def test_header_names_params_results_and_effects():
    filecheck(
        str(programs.state_ops()),
        """
        CHECK-LABEL: func @state_ops(
        CHECK-SAME: %0: Ref{f32[8,128], tpu.vmem}, %1: i32[], %2: i32[4], %3: i32[])
        CHECK-SAME: -> (f32[128]) effects {read 0, write 0, accum 0} {
        CHECK: return %4
        CHECK-NEXT: }
        """,
    )


def test_no_effects_header_for_pure_functions():
    filecheck(
        str(programs.indexed()),
        """
        CHECK: func @indexed(%0: f32[8,128], %1: i32[], %2: i32[4]) -> (f32[64]) {
        """,
    )


def test_every_indexer_kind():
    filecheck(
        str(programs.state_ops()),
        r"""
        CHECK-LABEL: func @state_ops(%0: {{.*}}, %1: i32[], %2: i32[4], %3: i32[])
        CHECK-NEXT: [[ROW:%[0-9]+]] = get %0[%1, :] : f32[128]
        CHECK-NEXT: [[WIN:%[0-9]+]] = get %0[3, ds(%1, 8, 2)] : f32[8]
        CHECK-NEXT: get %0[ds(%1, 2), 0:128:2] : f32[2,64]
        CHECK-NEXT: get %0[2:8:2, 0:127:3] : f32[3,43]
        CHECK-NEXT: get %0[0:0, 5:6] : f32[0,1]
        CHECK-NEXT: [[G:%[0-9]+]] = get %0[%2, 0] : f32[4]
        CHECK-NEXT: get %0[%2, %1] : f32[4]
        CHECK-NEXT: swap %0[%2, 1], [[G]] : f32[4]
        CHECK-NEXT: get %0[0, array(%3)] : f32[]
        CHECK-NEXT: {{^  }}addupdate %0[0, 0:128:16], [[WIN]]{{$}}
        CHECK-NEXT: {{^  }}addupdate %0[7, :], [[ROW]]{{$}}
        CHECK-NEXT: [[MASK:%[0-9]+]] = gt [[WIN]], [[WIN]] : bool[8]
        CHECK-NEXT: [[ZERO:%[0-9]+]] = constant 0.0 : f32[]
        CHECK-NEXT: load %0[1, 8:16] : f32[8]
        CHECK-NEXT: load %0[1, 8:16], mask [[MASK]] : f32[8]
        CHECK-NEXT: load %0[1, 8:16], mask [[MASK]], other [[ZERO]] : f32[8]
        CHECK-NEXT: load %0[1, 8:16], mask [[MASK]], other [[WIN]] : f32[8]
        CHECK-NEXT: {{^  }}store %0[1, 8:16], [[WIN]]{{$}}
        CHECK-NEXT: {{^  }}store %0[1, 8:16], [[WIN]], mask [[MASK]]{{$}}
        """,
    )


def test_views():
    filecheck(
        str(programs.views()),
        """
        CHECK: [[AT:%[0-9]+]] = ref.at %0[ds(%1, 4), :] : Ref{f32[4,128], tpu.vmem}
        CHECK-NEXT: ref.at [[AT]][1, 0:128:2] : Ref{f32[64], tpu.vmem}
        CHECK-NEXT: [[FLAT:%[0-9]+]] = ref.reshape %0 : Ref{f32[1024], tpu.vmem}
        CHECK-NEXT: ref.bitcast [[FLAT]] : Ref{i32[1024], tpu.vmem}
        CHECK-NEXT: ref.transpose %0, permutation (1, 0) : Ref{f32[128,8], tpu.vmem}
        """,
    )


def test_run_scoped_layout():
    filecheck(
        str(programs.scoped()),
        """
        CHECK-LABEL: func @scoped(%0: Ref{f32[8]})
        CHECK-NEXT: [[A:%[0-9]+]], [[B:%[0-9]+]] = run_scoped(%0) collective_axes ("x", "y") {
        CHECK-NEXT: ^([[S:%[0-9]+]]: Ref{f32[8], tpu.vmem}, [[T:%[0-9]+]]: Ref{i32[], tpu.smem},
        CHECK-SAME: [[IN:%[0-9]+]]: Ref{f32[8]}):
        CHECK-NEXT: [[V:%[0-9]+]] = get [[IN]][:] : f32[8]
        CHECK: swap [[T]][], {{%[0-9]+}} : i32[]
        CHECK-NEXT: [[N:%[0-9]+]] = run_scoped([[S]]) {
        CHECK-NEXT: {{^    }}^([[C:%[0-9]+]]: Ref{f32[8], tpu.vmem}):
        CHECK-NEXT: {{^      }}[[W:%[0-9]+]] = get [[C]][:] : f32[8]
        CHECK-NEXT: {{^      }}yield [[W]]
        CHECK-NEXT: {{^    }}} : f32[8]
        CHECK-NEXT: {{^    }}yield [[N]], [[V]]
        CHECK-NEXT: {{^  }}} : f32[8], f32[8]
        CHECK-NEXT: run_scoped() {
        CHECK-NEXT: ^({{%[0-9]+}}: Ref{bf16[2,2]}):
        CHECK-NEXT: {{^    }}yield{{$}}
        CHECK-NEXT: {{^  }}}{{$}}
        CHECK-NEXT: uninitialized : bf16[2,3]
        CHECK-NEXT: return [[A]], [[B]]
        """,
    )


def test_control_flow_layout_and_callees_first():
    filecheck(
        str(programs.control()),
        """
        CHECK-LABEL: func @"<lambda>"(%0: Ref{f32[8]}, %1: f32[]) -> (f32[8], f32[])
        CHECK-LABEL: func @control(%0: Ref{f32[8]}, %1: i32[], %2: f32[])
        CHECK-NEXT: [[LO:%[0-9]+]] = constant 0 : i32[]
        CHECK-NEXT: = for [[LO]] to %1 (%0) iter (%2) {
        CHECK-NEXT: ^([[I:%[0-9]+]]: i32[], [[R:%[0-9]+]]: Ref{f32[8]}, {{%[0-9]+}}: f32[]):
        CHECK-NEXT: get [[R]][[[I]]] : f32[]
        CHECK: } : f32[]
        CHECK-NEXT: {{^  }}for [[LO]] to %1 {
        CHECK: = while (%2) (%0) iter (%1) cond {
        CHECK: } body {
        CHECK: } : i32[]
        CHECK-NEXT: = cond %1 (%2, %0) [{
        CHECK: }, {
        CHECK: }, {
        CHECK: }] : f32[]
        CHECK-NEXT: {{^  }}cond %1 () [{
        CHECK-NEXT: {{^    }}yield
        CHECK-NEXT: {{^  }}}]
        CHECK-NEXT: = call @"<lambda>"(%0, %2) : f32[8], f32[]
        """,
    )


def test_array_ops():
    filecheck(
        str(programs.kernel_and_arrays()),
        """
        CHECK: program_id axis 0 : i32[]
        CHECK-NEXT: num_programs axis 2 : i32[]
        CHECK-NEXT: [[IOTA:%[0-9]+]] = iota dimension 1 : i32[8,16]
        CHECK-NEXT: add %0, %0 : f32[8,16]
        CHECK: eq %0, %0 : bool[8,16]
        CHECK: and [[IOTA]], [[IOTA]] : i32[8,16]
        CHECK: logistic %0 : f32[8,16]
        CHECK: select %2, %0, %0 : f32[8,16]
        CHECK-NEXT: optimization_barrier %0 : f32[8,16]
        CHECK-NEXT: optimization_barrier %2 : bool[8,16]
        CHECK-NEXT: convert %0 : bf16[8,16]
        CHECK-NEXT: bitcast %0 : u32[8,16]
        CHECK-NEXT: [[SUM:%[0-9]+]] = reduce_sum %0, axes (1) : f32[8]
        CHECK-NEXT: reduce_max %0, axes (0, 1) : f32[]
        CHECK-NEXT: reduce_min %0, axes () : f32[8,16]
        CHECK-NEXT: broadcast_in_dim [[SUM]], dims (0) : f32[8,3]
        CHECK-NEXT: reshape %0 : f32[2,4,16]
        CHECK-NEXT: transpose %0, permutation (1, 0) : f32[16,8]
        CHECK-NEXT: dot %0, %1 : f32[8,4]
        CHECK: dot {{%[0-9]+}}, {{%[0-9]+}} : f32[8,4]
        """,
    )


def test_constants():
    filecheck(
        str(programs.constants()),
        """
        CHECK: constant 1.5 : f32[]
        CHECK-NEXT: constant 0.1 : f32[8,128]
        CHECK-NEXT: constant {{\\[}}[1, 2, 3], [4, 5, 6]] : i32[2,3]
        CHECK-NEXT: constant [-128, 127] : i8[2]
        CHECK-NEXT: constant [0, 4294967295] : u32[2]
        CHECK-NEXT: constant [true, false, true] : bool[3]
        CHECK-NEXT: constant true : bool[3]
        CHECK-NEXT: constant [0.1, 0.334, 1e+30, -2.5] : bf16[4]
        CHECK-NEXT: constant [0.1, 65500.0, 6e-08, -0.0] : f16[4]
        CHECK-NEXT: constant [nan, inf, -inf, -0.0, 1e-45, 3.4028235e+38] : f32[6]
        CHECK-NEXT: constant [] : f32[0,3]
        CHECK-NEXT: constant {{\\[}}[], []] : i32[2,0]
        CHECK-NEXT: constant [0x7fc00001, 0xffc00000, 0x7f800001, 1e-45] : f32[4]
        CHECK-NEXT: constant [0x7e01, 0xfe00, 6e-08] : f16[3]
        CHECK-NEXT: constant [0x7fc1, 0xffc0, 9e-41] : bf16[3]
        CHECK-NEXT: constant 3.0 : bf16[]
        """,
    )


def test_locations():
    filecheck(
        print_function(programs.located(), locations=True),
        """
        CHECK: neg %0 : f32[] loc("/src/kernel.py":12)
        CHECK-NEXT: abs %1 : f32[] loc(3:7)
        CHECK-NEXT: exp %2 : f32[] loc("we\\"ird.py":4:2)
        CHECK-NEXT: sqrt %3 : f32[] loc(unknown)
        """,
    )
    assert "loc(" not in str(programs.located())


def test_numbering_follows_the_text_and_is_deterministic():
    fn = programs.control()
    text = str(fn)
    assert str(fn) == text
    defined = []
    for line in text.split("@control", 1)[1].splitlines():
        results = re.match(r"\s*((?:%\d+, )*%\d+) =", line)
        names = results.group(1).split(", ") if results else re.findall(r"(%\d+): ", line)
        defined += [int(name[1:]) for name in names]
    assert defined == list(range(len(defined)))
    assert len(defined) == len(fn.params) + sum(
        len(op.results) + sum(len(r.params) for r in op.regions) for op in fn.walk()
    )


def test_invalid_ir_still_prints():
    (x,) = params([programs.F32])
    stray = Value(programs.F32)
    b = Builder()
    y = b.create("neg", [x]).result
    bad = Op("add", (y, stray), (Value(programs.F32),))
    fn = Function("broken", Block((x,), (*b.ops, bad), bad.results))
    assert "%2 = add %1, %undef.0 : f32[]" in str(fn)


def test_an_op_without_syntax_is_an_error_naming_it():
    fn = Function("f", Block((), (Op("mystery", loc=Location("k.py", 3)),)))
    with pytest.raises(MiniPallasError, match=r"k.py:3: 'mystery': no text syntax for op"):
        str(fn)
