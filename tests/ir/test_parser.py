"""The parser: what it accepts beyond the printer's own output, the locations it gives ops, and
its errors (class, ``line:col`` and message, checked word for word)."""

import textwrap

import pytest

import minipallas
from minipallas.ir import Array, Dyn, Int, Location, Slice
from minipallas.ir.errors import ParseError
from minipallas.ir.parser import parse, parse_module


def text(s: str) -> str:
    return textwrap.dedent(s).strip("\n")


def test_public_names():
    assert minipallas.parse is parse
    assert minipallas.parse_module is parse_module


def test_ops_get_their_line_and_column():
    """An op is located at its name, as mlir-opt locates one (and as an error's carets show)."""
    fn = parse(
        text("""
        // a comment line
        func @f(%x: Ref{f32[8]}) -> (f32[8]) effects {read 0, write 0} {
          %y = get %x[:] : f32[8]
            %z = abs %y : f32[8]   // trailing comment
          store %x[:], %z
          return %z
        }
    """)
    )
    locs = [op.loc for op in fn.walk()]
    assert locs == [Location("", 3, 8), Location("", 4, 10), Location("", 5, 3)]


@pytest.mark.parametrize("inits", ["", " iter ()"])
def test_a_loop_carrying_nothing_ends_with_its_brace(inits):
    """docs/guides/text-syntax.md: no results, so no ':'; ``iter ()`` may be written."""
    fn = parse(
        "func @f(%r: Ref{f32[8]}, %n: i32[]) -> () effects {write 0} {\n"
        f"  for %n to %n (%r){inits} {{\n"
        "  ^(%i: i32[], %ref: Ref{f32[8]}):\n"
        "    %v = constant 1.0 : f32[8]\n    store %ref[:], %v\n    yield\n  }\n"
        "  return\n}"
    )
    assert "  for %1 to %1 (%0) {\n" in str(fn) and "  }\n  return" in str(fn)


def test_explicit_locations_win():
    fn = parse(
        text("""
        func @f(%x: f32[]) -> () {
          %a = neg %x : f32[] loc("k.py":12)
          %b = neg %x : f32[] loc("k.py":12:5)
          %c = neg %x : f32[] loc(40:2)
          %d = neg %x : f32[] loc(unknown)
          return
        }
    """)
    )
    assert [op.loc for op in fn.walk()] == [
        Location("k.py", 12),
        Location("k.py", 12, 5),
        Location("", 40, 2),
        Location(),
    ]


def test_names_are_free_form_and_printed_canonically():
    fn = parse(
        text("""
        func @f(%acc: f32[], %x.1: f32[]) -> (f32[]) {
          %sum_2 = add %acc, %x.1 : f32[]
          return %sum_2
        }
    """)
    )
    assert str(fn).splitlines()[1] == "  %2 = add %0, %1 : f32[]"


def test_regions_scope_their_names():
    # the same name inside two closed regions (and outside) is three different values
    fn = parse(
        text("""
        func @f(%r: Ref{f32[8]}) -> (f32[8], f32[8]) {
          %a = run_scoped(%r) {
          ^(%s: Ref{f32[8]}, %r: Ref{f32[8]}):
            %v = get %r[:] : f32[8]
            yield %v
          } : f32[8]
          %b = run_scoped(%r) {
          ^(%s: Ref{f32[8]}, %r: Ref{f32[8]}):
            %v = get %s[:] : f32[8]
            yield %v
          } : f32[8]
          return %a, %b
        }
    """)
    )
    first, second = fn.body.ops
    assert first.regions[0].ops[0].operands[0] is first.regions[0].params[1]
    assert second.regions[0].ops[0].operands[0] is second.regions[0].params[0]


FULL8, FULL16, FULL4 = Slice(0, 8, 1), Slice(0, 16, 1), Slice(0, 4, 1)


@pytest.mark.parametrize(
    "op, index, result, indexer",
    [
        ("ref.at", "...", "Ref{f32[8,16,4]}", (FULL8, FULL16, FULL4)),
        ("ref.at", "", "Ref{f32[8,16,4]}", (FULL8, FULL16, FULL4)),
        ("ref.at", "1", "Ref{f32[16,4]}", (Int(1), FULL16, FULL4)),
        ("ref.at", "..., 0", "Ref{f32[8,16]}", (FULL8, FULL16, Int(0))),
        ("ref.at", "2:, :4, ::2", "Ref{f32[6,4,2]}", (Slice(2, 6), Slice(0, 4), Slice(0, 2, 2))),
        ("ref.at", "1:7:3, 0:16:5", "Ref{f32[2,4,4]}", (Slice(1, 2, 3), Slice(0, 4, 5), FULL4)),
        (
            "ref.at",
            "ds(3, 4), ds(%i, 8, 2)",
            "Ref{f32[4,8,4]}",
            (Slice(3, 4), Slice(Dyn(0), 8, 2), FULL4),
        ),
        ("get", "%a, %i", "f32[3,4]", (Array(Dyn(0)), Int(Dyn(1)), FULL4)),
        ("get", "0, array(%i), %i", "f32[]", (Int(0), Array(Dyn(0)), Int(Dyn(1)))),
    ],
)
def test_index_sugar(op, index, result, indexer):
    fn = parse(
        text(f"""
        func @f(%r: Ref{{f32[8,16,4]}}, %i: i32[], %a: i32[3]) -> () {{
          %v = {op} %r[{index}] : {result}
          return
        }}
    """)
    )
    assert fn.body.ops[0].attrs["indexer"] == indexer


def test_dynamic_indices_are_numbered_in_order_of_appearance():
    fn = parse(
        text("""
        func @f(%r: Ref{f32[8,16]}, %i: i32[], %j: i32[]) -> () {
          %v = get %r[%j, ds(%i, 4)] : f32[4]
          return
        }
    """)
    )
    op = fn.body.ops[0]
    assert op.operands == (fn.params[0], fn.params[2], fn.params[1])
    assert op.attrs["indexer"] == (Int(Dyn(0)), Slice(Dyn(1), 4))


def test_effects_header_is_checked():
    good = text("""
        func @f(%r: Ref{f32[8]}) -> () effects {read 0, write 0} {
          %v = get %r[:] : f32[8]
          store %r[:], %v
          return
        }
    """)
    assert str(parse(good)) == good.replace("%r", "%0").replace("%v", "%1")


def test_parse_returns_the_last_function_and_module_all():
    module_text = text("""
        func @g(%x: f32[]) -> (f32[]) {
          return %x
        }
        func @f(%x: f32[]) -> (f32[]) {
          %y = call @g(%x) : f32[]
          return %y
        }
    """)
    module = parse_module(module_text)
    assert [f.name for f in module.functions] == ["g", "f"]
    fn = parse(module_text)
    assert fn.name == "f"
    assert fn.body.ops[0].attrs["callee"].name == "g"


def test_quoted_function_names():
    fn = parse('func @"<lambda>"() -> () {\n  return\n}')
    assert fn.name == "<lambda>"


def test_constant_forms():
    fn = parse(
        text("""
        func @f() -> () {
          %a = constant -1 : i32[2]
          %b = constant [1.0, nan, -inf, 0x7fc00001] : f32[4]
          %c = constant [[true], [false]] : bool[2,1]
          %d = constant 0x7f : i8[]
          %e = constant 1e39 : f32[]
          return
        }
    """)
    )
    arrays = [op.attrs["value"].array() for op in fn.walk()]
    assert arrays[0].tolist() == [-1, -1]
    assert arrays[1].view("uint32").tolist() == [0x3F800000, 0x7FC00000, 0xFF800000, 0x7FC00001]
    assert arrays[2].tolist() == [[True], [False]]
    assert arrays[3].tolist() == 127
    assert arrays[4].tolist() == float("inf")


H = "func @f(%0: f32[8], %1: Ref{f32[8,128]}, %2: i32[]) -> (f32[8]) {\n"
ERRORS = {
    "missing_colon": (
        H + "  %3 = add %0, %0 f32[8]\n  return %3\n}",
        "2:19: expected ':' after operand list, got 'f32'",
    ),
    "undefined": (H + "  %3 = add %0, %9 : f32[8]\n  return %3\n}", "2:16: undefined value %9"),
    "redefinition": (
        H + "  %0 = neg %0 : f32[8]\n  return %0\n}",
        "2:3: redefinition of %0 (first defined at 1:9)",
    ),
    "unknown_op": (
        H + "  %3 = frobnicate %0 : f32[8]\n  return %3\n}",
        "2:8: unknown op 'frobnicate'\n"
        "  fix: the op reference (docs/reference/ops.md) lists every op",
    ),
    "misspelt_op": (
        H + "  %3 = mull %0, %0 : f32[8]\n  return %3\n}",
        "2:8: unknown op 'mull'\n  fix: did you mean 'mul'?",
    ),
    "outer_value": (
        H + "  %3 = run_scoped() {\n  ^(%4: Ref{f32[8]}):\n    %5 = neg %0 : f32[8]\n"
        "    yield %5\n  } : f32[8]\n  return %3\n}",
        "4:14: %0 is defined outside this region; regions are closed, so pass it in as an "
        "operand of the region's op",
    ),
    "bad_char": (H + "  %3 = neg %0 : f32[8] $\n  return %3\n}", "2:24: unexpected character '$'"),
    "names_vs_types": (
        H + "  %3, %4 = neg %0 : f32[8]\n  return %3\n}",
        "2:12: 'neg': 2 result names but 1 result type",
    ),
    "no_result_name": (
        H + "  neg %0\n  return %0\n}",
        "2:3: 'neg': the op has 1 result, but the text names 0",
    ),
    "unknown_dtype": (
        "func @f(%0: f64[8]) -> () {\n  return\n}",
        "1:13: unknown element type 'f64'\n  fix: did you mean 'f16'? The element types are "
        "f32, bf16, f16, i32, i16, i8, u32, u16, u8, bool",
    ),
    "misspelt_dtype": (
        "func @f(%0: f23[8]) -> () {\n  return\n}",
        "1:13: unknown element type 'f23'\n  fix: did you mean 'f32'? The element types are "
        "f32, bf16, f16, i32, i16, i8, u32, u16, u8, bool",
    ),
    "not_a_type": (
        "func @f(%0: return) -> () {\n  return\n}",
        "1:13: expected a type like f32[8] or Ref{f32[8]}, got 'return'",
    ),
    "unknown_space": (
        "func @f(%0: Ref{f32[8], tpu.hbm}) -> () {\n  return\n}",
        "1:25: unknown memory space 'tpu.hbm'; expected one of any, tpu.vmem, "
        "tpu.smem, tpu.vmem_shared, gpu.gmem, gpu.smem, semaphore, dma_semaphore",
    ),
    "return_types": (H + "  return %2\n}", "2:3: returns (i32[]), but the header says (f32[8])"),
    "effects_header": (
        "func @f(%0: Ref{f32[8]}) -> (f32[8]) effects {read 0, write 0} {\n"
        "  %1 = get %0[:] : f32[8]\n  return %1\n}",
        "1:38: the header says effects {read 0, write 0}, but the body has {read 0}\n"
        "  fix: write 'effects {read 0}', or leave the header's effects out (they are checked "
        "only when written)",
    ),
    "effect_kind": (
        "func @f(%0: Ref{f32[8]}) -> () effects {touch 0} {\n  return\n}",
        "1:41: unknown effect 'touch'; expected read, write or accum",
    ),
    "unknown_callee": (
        H + "  %3 = call @g(%0) : f32[8]\n  return %3\n}",
        "2:13: unknown function @g; a callee must be defined before its callers",
    ),
    "function_redefinition": (
        "func @f() -> () {\n  return\n}\nfunc @f() -> () {\n  return\n}",
        "4:6: redefinition of function @f",
    ),
    "missing_yield": (
        H + "  %3 = run_scoped() {\n  ^(%4: Ref{f32[8]}):\n"
        "    %5 = get %4[:] : f32[8]\n  } : f32[8]\n  return %3\n}",
        "5:3: expected an op or 'yield', got '}'",
    ),
    "end_of_input": (
        H + "  %3 = neg %0 : f32[8]\n",
        "3:1: expected an op or 'return', got end of input",
    ),
    "empty": ("", "1:1: expected 'func' to start a function, got end of input"),
    "too_many_indices": (
        H + "  %3 = get %1[0, 0, 0] : f32[]\n  return %0\n}",
        "2:14: 3 indices for Ref{f32[8,128]} of rank 2",
    ),
    "two_ellipses": (
        H + "  %3 = get %1[..., ...] : f32[8,128]\n  return %0\n}",
        "2:14: an indexer can have only one '...'",
    ),
    "ragged": (
        "func @f() -> () {\n  %0 = constant [[1, 2], [3]] : i32[2,2]\n  return\n}",
        "2:17: ragged list: all elements must have the same shape",
    ),
    "int_range": (
        "func @f() -> () {\n  %0 = constant [1, 300] : i8[2]\n  return\n}",
        "2:21: 300 does not fit in i8",
    ),
    "literal_shape": (
        "func @f() -> () {\n  %0 = constant [1, 2, 3] : i32[2]\n  return\n}",
        "2:17: 'constant': the value has shape [3], but the type is i32[2]",
    ),
    "bool_for_float": (
        "func @f() -> () {\n  %0 = constant true : f32[]\n  return\n}",
        "2:17: expected a number for f32, got 'true'",
    ),
    "float_for_int": (
        "func @f() -> () {\n  %0 = constant 1.5 : i32[]\n  return\n}",
        "2:17: expected an integer for i32, got '1.5'",
    ),
    "hex_too_wide": (
        "func @f() -> () {\n  %0 = constant 0x1ffff : f16[]\n  return\n}",
        "2:17: bits 0x1ffff do not fit in f16",
    ),
    "ds_unclosed": (
        H + "  %3 = get %1[0, ds(%2, 8] : f32[8]\n  return %3\n}",
        "2:26: expected ')' to close 'ds(', got ']'",
    ),
    "negative_dim": (
        "func @f(%0: f32[-1]) -> () {\n  return\n}",
        "1:17: expected an integer >= 0 as a dimension, got -1",
    ),
    "zero_stride": (
        H + "  %3 = get %1[0, 0:8:0] : f32[8]\n  return %0\n}",
        "2:22: expected an integer >= 1 in the slice, got 0",
    ),
    "iota_no_result": (
        "func @f() -> () {\n  iota dimension 0\n  return\n}",
        "2:3: 'iota': needs a result name and type",
    ),
    "unterminated_string": (
        'func @f() -> () {\n  %0 = run_scoped() collective_axes ("x) {\n    yield\n  }\n'
        "  return\n}",
        "2:38: unexpected character '\"'",
    ),
    "for_missing_to": (
        H + "  for %2 %2 {\n  ^(%3: i32[]):\n    yield\n  }\n  return %0\n}",
        "2:10: expected 'to' after the lower bound, got '%2'",
    ),
    "colon_without_types": (  # a loop carrying nothing ends with '}' alone
        H + "  for %2 to %2 () {\n  ^(%3: i32[]):\n    yield\n  } :\n  return %0\n}",
        "5:5: 'for': expected the result types after ':', got 'return'\n"
        "  fix: an op with no results has no ':' (a loop carrying nothing ends with '}' alone)",
    ),
    "yield_in_function": (H + "  yield %0\n}", "2:3: expected an op or 'return', got 'yield'"),
    "missing_arrow": (
        "func @f(%0: f32[8]) (f32[8]) {\n  return %0\n}",
        "1:21: expected '->' after the parameter list, got '('",
    ),
    "region_params_colon": (
        H + "  %3 = run_scoped() {\n  ^(%4: Ref{f32[8]})\n    yield %0\n  } : f32[8]\n"
        "  return %3\n}",
        "4:5: expected ':' after the region parameters, got 'yield'",
    ),
    "while_missing_body": (
        H + "  %3 = while () () iter (%2) cond {\n  ^(%4: i32[]):\n"
        "    %5 = lt %4, %4 : bool[]\n    yield %5\n  } : i32[]\n  return %0\n}",
        "6:5: expected 'body' before the body region, got ':'",
    ),
    "bad_loc": (
        H + '  %3 = neg %0 : f32[8] loc("a.py")\n  return %3\n}',
        "2:34: expected ':' after the file name, got ')'",
    ),
    "cond_no_branches": (
        H + "  %3 = cond %2 (%0) [] : f32[8]\n  return %3\n}",
        "2:22: expected '{' to open a region, got ']'",
    ),
}


@pytest.mark.parametrize("case", ERRORS, ids=str)
def test_parse_errors(case):
    """Errors in the text itself; type errors are the verifier's (test_parser_type_errors)."""
    source, message = ERRORS[case]
    with pytest.raises(ParseError) as info:
        parse(source)
    assert str(info.value) == message
    line, col = (int(n) for n in message.split(":")[:2])
    assert info.value.loc == Location("", line, col)
