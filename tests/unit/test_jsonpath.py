"""kubectl's JSONPath, case by case: the cases client-go's own ``util/jsonpath`` tests pin (its evaluation, parser
and error cases), written here as data, and the engine's printing of numbers, maps and cells as Go prints them.

Inputs are JSON documents. A case whose input client-go builds from Go structs is written as the JSON object kubectl
would see: kubectl always evaluates a template on an unstructured object, whose keys Go's encoder prints sorted (a
struct would print its fields in declaration order), so those expected maps are sorted here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from gpuctl.cli.jsonpath import (
    JSONPathError,
    go_float,
    go_json,
    go_sprint,
    relaxed,
    render_template,
    results,
    value_at,
)


@dataclass(frozen=True)
class Case:
    name: str
    template: str
    input: Any
    expect: str | None
    """The output, or None when the template must fail."""
    allow_missing: bool = False
    error: str = ""
    """A fragment the error message holds (client-go's own words where it has them)."""
    any_order: bool = False
    """The results come from a map, whose order Go does not fix: compare them as a sorted set of words."""


TYPES = {
    "bools": [True, False, True, False],
    "integers": [1, 2, 3, 4],
    "floats": [1.0, 2.2, 3.3, 4.0],
    "strings": ["one", "two", "three", "four"],
    "interfaces": [True, "one", 1, 1.1],
    "maps": [
        {"name": "one", "value": 1},
        {"name": "two", "value": 2.02},
        {"name": "three", "value": 3.03},
        {"name": "four", "value": 4.04},
    ],
    "structs": [
        {"name": "one", "value": 1, "type": "integer"},
        {"name": "two", "value": 2.002, "type": "float"},
        {"name": "three", "value": 3, "type": "integer"},
        {"name": "four", "value": 4.004, "type": "float"},
    ],
}

TYPES_CASES = [
    Case("boolSlice", "{ .bools }", TYPES, "[true,false,true,false]"),
    Case("boolSliceIndex", "{ .bools[0] }", TYPES, "true"),
    Case("boolSliceIndexReverse", "{ .bools[-1] }", TYPES, "false"),
    Case("boolSubSlice", "{ .bools[0:2] }", TYPES, "true false"),
    Case("boolSubSliceFirst2", "{ .bools[:2] }", TYPES, "true false"),
    Case("boolSubSliceStep2", "{ .bools[:4:2] }", TYPES, "true true"),
    Case("integerSlice", "{ .integers }", TYPES, "[1,2,3,4]"),
    Case("integerSliceIndex", "{ .integers[0] }", TYPES, "1"),
    Case("integerSliceIndexReverse", "{ .integers[-2] }", TYPES, "3"),
    Case("integerSubSliceFirst2", "{ .integers[0:2] }", TYPES, "1 2"),
    Case("integerSubSliceFirst2Alt", "{ .integers[:2] }", TYPES, "1 2"),
    Case("integerSubSliceStep2", "{ .integers[:4:2] }", TYPES, "1 3"),
    Case("floatSlice", "{ .floats }", TYPES, "[1,2.2,3.3,4]"),
    Case("floatSliceIndex", "{ .floats[0] }", TYPES, "1"),
    Case("floatSliceIndexReverse", "{ .floats[-2] }", TYPES, "3.3"),
    Case("floatSubSliceFirst2", "{ .floats[0:2] }", TYPES, "1 2.2"),
    Case("floatSubSliceFirst2Alt", "{ .floats[:2] }", TYPES, "1 2.2"),
    Case("floatSubSliceStep2", "{ .floats[:4:2] }", TYPES, "1 3.3"),
    Case("stringSlice", "{ .strings }", TYPES, '["one","two","three","four"]'),
    Case("stringSliceIndex", "{ .strings[0] }", TYPES, "one"),
    Case("stringSliceIndexReverse", "{ .strings[-2] }", TYPES, "three"),
    Case("stringSubSliceFirst2", "{ .strings[0:2] }", TYPES, "one two"),
    Case("stringSubSliceFirst2Alt", "{ .strings[:2] }", TYPES, "one two"),
    Case("stringSubSliceStep2", "{ .strings[:4:2] }", TYPES, "one three"),
    Case("interfaceSlice", "{ .interfaces }", TYPES, '[true,"one",1,1.1]'),
    Case("interfaceSliceIndex", "{ .interfaces[0] }", TYPES, "true"),
    Case("interfaceSliceIndexReverse", "{ .interfaces[-2] }", TYPES, "1"),
    Case("interfaceSubSliceFirst2", "{ .interfaces[0:2] }", TYPES, "true one"),
    Case("interfaceSubSliceFirst2Alt", "{ .interfaces[:2] }", TYPES, "true one"),
    Case("interfaceSubSliceStep2", "{ .interfaces[:4:2] }", TYPES, "true 1"),
    Case(
        "mapSlice",
        "{ .maps }",
        TYPES,
        '[{"name":"one","value":1},{"name":"two","value":2.02},{"name":"three","value":3.03},{"name":"four","value":4.04}]',
    ),
    Case("mapSliceIndex", "{ .maps[0] }", TYPES, '{"name":"one","value":1}'),
    Case("mapSliceIndexReverse", "{ .maps[-2] }", TYPES, '{"name":"three","value":3.03}'),
    Case("mapSubSliceFirst2", "{ .maps[0:2] }", TYPES, '{"name":"one","value":1} {"name":"two","value":2.02}'),
    Case("mapSubSliceFirst2Alt", "{ .maps[:2] }", TYPES, '{"name":"one","value":1} {"name":"two","value":2.02}'),
    Case("mapSubSliceStepOdd", "{ .maps[::2] }", TYPES, '{"name":"one","value":1} {"name":"three","value":3.03}'),
    Case("mapSubSliceStepEven", "{ .maps[1::2] }", TYPES, '{"name":"two","value":2.02} {"name":"four","value":4.04}'),
    Case(
        "structSlice",
        "{ .structs }",
        TYPES,
        '[{"name":"one","type":"integer","value":1},{"name":"two","type":"float","value":2.002},'
        '{"name":"three","type":"integer","value":3},{"name":"four","type":"float","value":4.004}]',
    ),
    Case("structSliceIndex", "{ .structs[0] }", TYPES, '{"name":"one","type":"integer","value":1}'),
    Case("structSliceIndexReverse", "{ .structs[-2] }", TYPES, '{"name":"three","type":"integer","value":3}'),
    Case(
        "structSubSliceFirst2",
        "{ .structs[0:2] }",
        TYPES,
        '{"name":"one","type":"integer","value":1} {"name":"two","type":"float","value":2.002}',
    ),
    Case(
        "structSubSliceFirst2Alt",
        "{ .structs[:2] }",
        TYPES,
        '{"name":"one","type":"integer","value":1} {"name":"two","type":"float","value":2.002}',
    ),
    Case(
        "structSubSliceStepOdd",
        "{ .structs[::2] }",
        TYPES,
        '{"name":"one","type":"integer","value":1} {"name":"three","type":"integer","value":3}',
    ),
    Case(
        "structSubSliceStepEven",
        "{ .structs[1::2] }",
        TYPES,
        '{"name":"two","type":"float","value":2.002} {"name":"four","type":"float","value":4.004}',
    ),
]

STORE = {
    "Book": [
        {"Category": "reference", "Author": "Nigel Rees", "Title": "Sayings of the Centurey", "Price": 8.95},
        {"Category": "fiction", "Author": "Evelyn Waugh", "Title": "Sword of Honour", "Price": 12.99},
        {"Category": "fiction", "Author": "Herman Melville", "Title": "Moby Dick", "Price": 8.99},
    ],
    "Bicycle": [{"Color": "red", "Price": 19.95, "IsNew": True}, {"Color": "green", "Price": 20.01, "IsNew": False}],
    "Name": "jsonpath",
    "Labels": {"engieer": 10, "web/html": 15, "k8s-app": 20},
    "Employees": {"jason": "manager", "dan": "clerk"},
}
MOBY_DICK = '{"Author":"Herman Melville","Category":"fiction","Price":8.99,"Title":"Moby Dick"}'

STORE_CASES = [
    Case("plain", "hello jsonpath", None, "hello jsonpath"),
    Case("recursive", "{..}", [1, 2, 3], "[1,2,3]"),
    Case("filter", "{[?(@<5)]}", [2, 6, 3, 7], "2 3"),
    Case("quote", '{"{"}', None, "{"),
    Case("union", "{[1,3,4]}", [0, 1, 2, 3, 4], "1 3 4"),
    Case("array", "{[0:2]}", ["Monday", "Tudesday"], "Monday Tudesday"),
    Case("variable", "hello {.Name}", STORE, "hello jsonpath"),
    Case("dict/", "{$.Labels.web/html}", STORE, "15"),
    Case("dict/ jason", "{$.Employees.jason}", STORE, "manager"),
    Case("dict/ dan", "{$.Employees.dan}", STORE, "clerk"),
    Case("dict-", "{.Labels.k8s-app}", STORE, "20"),
    Case("nest", "{.Bicycle[*].Color}", STORE, "red green"),
    Case("allarray", "{.Book[*].Author}", STORE, "Nigel Rees Evelyn Waugh Herman Melville"),
    Case("allfields", '{range .Bicycle[*]}{ "{" }{ @.* }{ "} " }{end}', STORE, "{red 19.95 true} {green 20.01 false} "),
    Case("recurfields", "{..Price}", STORE, "8.95 12.99 8.99 19.95 20.01"),
    Case("recurdotfields", "{...Price}", STORE, "8.95 12.99 8.99 19.95 20.01"),
    Case("superrecurfields", "{" + "." * 60 + "Price}", STORE, None, error="invalid multiple recursive descent"),
    Case(
        "allstructsSlice",
        "{.Bicycle}",
        STORE,
        '[{"Color":"red","IsNew":true,"Price":19.95},{"Color":"green","IsNew":false,"Price":20.01}]',
    ),
    Case(
        "allstructs",
        '{range .Bicycle[*]}{ @ }{ " " }{end}',
        STORE,
        '{"Color":"red","IsNew":true,"Price":19.95} {"Color":"green","IsNew":false,"Price":20.01} ',
    ),
    Case("lastarray", "{.Book[-1:]}", STORE, MOBY_DICK),
    Case("recurarray", "{..Book[2]}", STORE, MOBY_DICK),
    Case("bool", "{.Bicycle[?(@.IsNew==true)]}", STORE, '{"Color":"red","IsNew":true,"Price":19.95}'),
    # Missing keys, allowed.
    Case("nonexistent field", "{.hello}", STORE, "", allow_missing=True),
    Case("nonexistent field 2", "before-{.hello}after", STORE, "before-after", allow_missing=True),
    # Failures, with client-go's messages.
    Case("invalid identifier", "{hello}", STORE, None, error="unrecognized identifier hello"),
    Case("nonexistent field, strict", "{.hello}", STORE, None, error="hello is not found"),
    Case("invalid array", "{.Labels[0]}", STORE, None, error="is not array or slice"),
    Case("invalid filter operator", "{.Book[?(@.Price<>10)]}", STORE, None, error="unrecognized filter operator <>"),
    Case("redundant end", "{range .Labels.*}{@}{end}{end}", STORE, None, error="not in range, nothing to end"),
]

POINTS = [
    {"id": "i1", "x": 4, "y": -5},
    {"id": "i2", "x": -2, "y": -5, "z": 1},
    {"id": "i3", "x": 8, "y": 3},
    {"id": "i4", "x": -6, "y": -1},
    {"id": "i5", "x": 0, "y": 2, "z": 1},
    {"id": "i6", "x": 1, "y": 4},
    {"id": "i7", "x": None, "y": 4},
]
JSON_CASES = [
    Case("exists filter", "{[?(@.z)].id}", POINTS, "i2 i5"),
    Case("bracket key", "{[0]['id']}", POINTS, "i1"),
    Case("nil value", "{[-1]['x']}", POINTS, "null"),
]

NODES = json.loads(
    """{
      "kind": "List",
      "items": [
        {"kind": "None",
         "metadata": {"name": "127.0.0.1", "labels": {"kubernetes.io/hostname": "127.0.0.1"}},
         "status": {"capacity": {"cpu": "4"}, "ready": true,
                    "addresses": [{"type": "LegacyHostIP", "address": "127.0.0.1"}]}},
        {"kind": "None",
         "metadata": {"name": "127.0.0.2", "labels": {"kubernetes.io/hostname": "127.0.0.2"}},
         "status": {"capacity": {"cpu": "8"}, "ready": false,
                    "addresses": [{"type": "LegacyHostIP", "address": "127.0.0.2"},
                                  {"type": "another", "address": "127.0.0.3"}]}}
      ],
      "users": [{"name": "myself", "user": {}}, {"name": "e2e", "user": {"username": "admin", "password": "secret"}}]
    }"""
)
KUBERNETES_CASES = [
    Case("range item", "{range .items[*]}{.metadata.name}, {end}{.kind}", NODES, "127.0.0.1, 127.0.0.2, List"),
    Case("range item with quote", '{range .items[*]}{.metadata.name}{"\\t"}{end}', NODES, "127.0.0.1\t127.0.0.2\t"),
    Case("range addresss", "{.items[*].status.addresses[*].address}", NODES, "127.0.0.1 127.0.0.2 127.0.0.3"),
    Case(
        "double range",
        "{range .items[*]}{range .status.addresses[*]}{.address}, {end}{end}",
        NODES,
        "127.0.0.1, 127.0.0.2, 127.0.0.3, ",
    ),
    Case("item name", "{.items[*].metadata.name}", NODES, "127.0.0.1 127.0.0.2"),
    Case(
        "union nodes capacity",
        "{.items[*]['metadata.name', 'status.capacity']}",
        NODES,
        '127.0.0.1 127.0.0.2 {"cpu":"4"} {"cpu":"8"}',
    ),
    Case(
        "range nodes capacity",
        "{range .items[*]}[{.metadata.name}, {.status.capacity}] {end}",
        NODES,
        '[127.0.0.1, {"cpu":"4"}] [127.0.0.2, {"cpu":"8"}] ',
    ),
    Case("user password", '{.users[?(@.name=="e2e")].user.password}', NODES, "secret"),
    Case("hostname", "{.items[0].metadata.labels.kubernetes\\.io/hostname}", NODES, "127.0.0.1"),
    Case("hostname filter", '{.items[?(@.metadata.labels.kubernetes\\.io/hostname=="127.0.0.1")].kind}', NODES, "None"),
    Case("bool item", "{.items[?(@..ready==true)].metadata.name}", NODES, "127.0.0.1"),
    Case("recursive name", "{..name}", NODES, "127.0.0.1 127.0.0.2 myself e2e", any_order=True),
]

EMPTY = {"items": []}
EMPTY_RANGE_CASES = [
    Case("empty range", "{range .items[*]}{.metadata.name}{end}", EMPTY, "", allow_missing=True),
    Case(
        "empty nested range",
        '{range .items[*]}{.metadata.name}{":"}{range @.spec.containers[*]}{.name}{","}{end}{"+"}{end}',
        EMPTY,
        "",
        allow_missing=True,
    ),
]

PODS = {
    "items": [
        {
            "metadata": {"name": "pod1"},
            "spec": {
                "containers": [
                    {"name": "foo", "another": [{"name": "value1"}, {"name": "value2"}]},
                    {"name": "bar", "another": [{"name": "value1"}, {"name": "value2"}]},
                ]
            },
        },
        {
            "metadata": {"name": "pod2"},
            "spec": {"containers": [{"name": "baz", "another": [{"name": "value1"}, {"name": "value2"}]}]},
        },
    ]
}
NESTED_RANGE_CASES = [
    Case(
        "nested range with a trailing newline",
        '{range .items[*]}{.metadata.name}{":"}{range @.spec.containers[*]}{.name}{","}{end}{"+"}{end}',
        PODS,
        "pod1:foo,bar,+pod2:baz,+",
    ),
    Case(
        "nested range with a trailing character within another nested range with a trailing newline",
        '{range .items[*]}{.metadata.name}{"~"}{range @.spec.containers[*]}{.name}{":"}'
        '{range @.another[*]}{.name}{","}{end}{"+"}{end}{"#"}{end}',
        PODS,
        "pod1~foo:value1,value2,+bar:value1,value2,+#pod2~baz:value1,value2,+#",
    ),
    Case(
        "two nested ranges at the same level with a trailing newline",
        '{range .items[*]}{.metadata.name}{"\\t"}{range @.spec.containers[*]}{.name}{" "}{end}{"\\t"}'
        '{range @.spec.containers[*]}{.name}{" "}{end}{"\\n"}{end}',
        PODS,
        "pod1\tfoo bar \tfoo bar \npod2\tbaz \tbaz \n",
    ),
]

ANNOTATED = {
    "kind": "List",
    "items": [
        {"kind": "Pod", "metadata": {"name": "pod1", "annotations": {"color": "blue"}}},
        {"kind": "Pod", "metadata": {"name": "pod2"}},
        {"kind": "Pod", "metadata": {"name": "pod3", "annotations": {"color": "green"}}},
        {"kind": "Pod", "metadata": {"name": "pod4", "annotations": {"color": "blue"}}},
    ],
}
BLUE = '{.items[?(@.metadata.annotations.color=="blue")].metadata.name}'
FILTER_MISSING_CASES = [
    Case("filter tolerating items without annotations", BLUE, ANNOTATED, "pod1 pod4", allow_missing=True),
    Case("filter failing on items without annotations", BLUE, ANNOTATED, None, error="annotations is not found"),
]

CONTAINERS4 = {"kind": "Pod", "spec": {"containers": [{"name": f"fake{i}", "image": "busybox"} for i in range(4)]}}
NEGATIVE_INDEX_CASES = [
    Case("containers[0]", "{.spec.containers[0].name}", CONTAINERS4, "fake0"),
    Case("containers[0:0] is empty", "{.spec.containers[0:0].name}", CONTAINERS4, ""),
    Case("containers[0:-1] is [0:3]", "{.spec.containers[0:-1].name}", CONTAINERS4, "fake0 fake1 fake2"),
    Case("containers[-1:0] fails", "{.spec.containers[-1:0].name}", CONTAINERS4, None, error="greater than"),
    Case("containers[-1] is [3]", "{.spec.containers[-1].name}", CONTAINERS4, "fake3"),
    Case("containers[-1:] is [3:]", "{.spec.containers[-1:].name}", CONTAINERS4, "fake3"),
    Case("containers[-2] is [2]", "{.spec.containers[-2].name}", CONTAINERS4, "fake2"),
    Case("containers[-2:] is [2:]", "{.spec.containers[-2:].name}", CONTAINERS4, "fake2 fake3"),
    Case("containers[-3] is [1]", "{.spec.containers[-3].name}", CONTAINERS4, "fake1"),
    Case("containers[-4] is [0]", "{.spec.containers[-4].name}", CONTAINERS4, "fake0"),
    Case("containers[-4:] is [0:]", "{.spec.containers[-4:].name}", CONTAINERS4, "fake0 fake1 fake2 fake3"),
    Case("containers[-5] is out of bounds", "{.spec.containers[-5].name}", CONTAINERS4, None, error="out of bounds"),
    Case("containers[5:5] is empty", "{.spec.containers[5:5].name}", CONTAINERS4, ""),
    Case("containers[-5:-5] is empty", "{.spec.containers[-5:-5].name}", CONTAINERS4, ""),
    Case("containers[3:1] fails", "{.spec.containers[3:1].name}", CONTAINERS4, None, error="greater than"),
    Case("containers[-1:-2] fails", "{.spec.containers[-1:-2].name}", CONTAINERS4, None, error="greater than"),
]

RUNNING = {
    "kind": "List",
    "items": [
        *({"kind": "Pod", "metadata": {"name": f"pod{i}"}, "status": {"phase": "Running"}} for i in (1, 2, 3)),
        {"resourceVersion": ""},
    ],
}
RUNNING_CASES = [
    Case(
        "range over pods without selecting the last one",
        '{range .items[?(.status.phase=="Running")]}{.metadata.name}{" is Running\\n"}{end}',
        RUNNING,
        "pod1 is Running\npod2 is Running\npod3 is Running\n",
        allow_missing=True,
    )
]

CONTAINERS6 = {"kind": "Pod", "spec": {"containers": [{"name": f"fake{i}", "image": "busybox"} for i in range(6)]}}
ALL6 = "fake0 fake1 fake2 fake3 fake4 fake5"
STEP_CASES = [
    Case("containers[0:] is [0:6:1]", "{.spec.containers[0:].name}", CONTAINERS6, ALL6),
    Case("containers[0:6:] is [0:6:1]", "{.spec.containers[0:6:].name}", CONTAINERS6, ALL6),
    Case("containers[0:6:1]", "{.spec.containers[0:6:1].name}", CONTAINERS6, ALL6),
    Case("containers[0:6:0] fails", "{.spec.containers[0:6:0].name}", CONTAINERS6, None, error="step must be > 0"),
    Case("containers[0:6:-1] fails", "{.spec.containers[0:6:-1].name}", CONTAINERS6, None, error="step must be > 0"),
    Case("containers[1:4:2]", "{.spec.containers[1:4:2].name}", CONTAINERS6, "fake1 fake3"),
    Case("containers[1:4:3]", "{.spec.containers[1:4:3].name}", CONTAINERS6, "fake1"),
    Case("containers[1:4:4]", "{.spec.containers[1:4:4].name}", CONTAINERS6, "fake1"),
    Case("containers[0:6:2]", "{.spec.containers[0:6:2].name}", CONTAINERS6, "fake0 fake2 fake4"),
    Case("containers[0:6:3]", "{.spec.containers[0:6:3].name}", CONTAINERS6, "fake0 fake3"),
    Case("containers[0:6:5]", "{.spec.containers[0:6:5].name}", CONTAINERS6, "fake0 fake5"),
    Case("containers[0:6:6]", "{.spec.containers[0:6:6].name}", CONTAINERS6, "fake0"),
]

# client-go's parser cases check the nodes a template parses into; here each is checked by what it evaluates to on an
# input that tells the parses apart.
BOOKSTORE = {
    "jsonpath": "J",
    "book": [{"author": "a1", "price": 2}, {"author": "a2", "price": 5}],
    "bicycle": {"price": 9},
}
PARSER_CASES = [
    Case("parse plain", "hello jsonpath", BOOKSTORE, "hello jsonpath"),
    Case("parse variable", "hello {.jsonpath}", BOOKSTORE, "hello J"),
    Case("parse arrayfiled", "hello {['jsonpath']}", BOOKSTORE, "hello J"),
    Case("parse quote", '{"{"}', BOOKSTORE, "{"),
    Case("parse array", "{[1:3]}", [0, 1, 2, 3], "1 2"),
    Case("parse allarray", "{.book[*].author}", BOOKSTORE, "a1 a2"),
    Case("parse wildcard", "{.bicycle.*}", BOOKSTORE, "9"),
    Case("parse filter", "{[?(@.price<3)]}", BOOKSTORE["book"], '{"author":"a1","price":2}'),
    Case("parse recursive", "{..}", [7], "[7]"),
    Case("parse recurField", "{..price}", BOOKSTORE, "2 5 9", any_order=True),
    Case("parse arraydict: a quoted key is a path", "{['book.price']}", {"book": {"price": 3}}, "3"),
    Case("parse union", "{['bicycle.price', 3, 'book.price']}", [0, 1, 2, 3], "3", allow_missing=True),
    Case("parse range", "{range .book[*]}{.author},{end}", BOOKSTORE, "a1,a2,"),
    Case("parse malformat input", "{\\\\\\}", BOOKSTORE, None, error="unrecognized character"),
    Case(
        "parse paired parentheses in quotes",
        '{[?(@.status.nodeInfo.osImage == "()")]}',
        [{"status": {"nodeInfo": {"osImage": "()"}}}, {"status": {"nodeInfo": {"osImage": "x"}}}],
        '{"status":{"nodeInfo":{"osImage":"()"}}}',
    ),
    Case(
        "parse paired parentheses in double quotes and with double quotes escape",
        '{[?(@.os == "(\\"\\")")]}',
        [{"os": '("")'}, {"os": "()"}],
        '{"os":"(\\"\\")"}',
    ),
    Case(
        "parse unregular parentheses in double quotes", '{[?(@.test == "())(")]}', [{"test": "())("}], '{"test":"())("}'
    ),
    Case(
        "parse plain text in single quotes", "{[?(@.os == 'Linux')]}", [{"os": "Linux"}, {"os": "x"}], '{"os":"Linux"}'
    ),
    Case("parse test filter suffix", '{[?(@.os == "{[()]}")]}', [{"os": "{[()]}"}], '{"os":"{[()]}"}'),
    Case("parse double inside single", "{[?(@.os == \"''\")]}", [{"os": "''"}], '{"os":"\'\'"}'),
    Case("parse single inside double", "{[?(@.os == '\"\"')]}", [{"os": '""'}], '{"os":"\\"\\""}'),
    Case("parse single containing escaped single", "{[?(@.os == '\\\\\\'')]}", [{"os": "\\'"}], '{"os":"\\\\\'"}'),
    Case("parse negative index slice, a[len-5] to a[len-1]", "{[-5:]}", list(range(7)), "2 3 4 5 6"),
    Case("parse negative index slice, a[len-1]", "{[-1]}", list(range(7)), "6"),
    Case("parse negative index slice, a[1] to a[len-1]", "{[1:-1]}", list(range(7)), "1 2 3 4 5"),
]

FAIL_PARSER_CASES = [
    Case("unclosed action", "{.hello", {}, None, error="unclosed action"),
    Case("unrecognized character", "{*}", {}, None, error="unrecognized character in action: U+002A '*'"),
    Case("invalid number", "{+12.3.0}", {}, None, error="cannot parse number +12.3.0"),
    Case("unterminated array", "{[1}", {}, None, error="unterminated array"),
    Case("unterminated filter", "{[?(.price]}", {}, None, error="unterminated filter"),
    Case("invalid multiple recursive descent", "{........}", {}, None, error="invalid multiple recursive descent"),
]

TABLE = (
    TYPES_CASES
    + STORE_CASES
    + JSON_CASES
    + KUBERNETES_CASES
    + EMPTY_RANGE_CASES
    + NESTED_RANGE_CASES
    + FILTER_MISSING_CASES
    + NEGATIVE_INDEX_CASES
    + RUNNING_CASES
    + STEP_CASES
    + PARSER_CASES
    + FAIL_PARSER_CASES
)


@pytest.mark.parametrize("case", TABLE, ids=lambda c: c.name)
def test_client_go_jsonpath_cases(case: Case) -> None:
    if case.expect is None:
        with pytest.raises(JSONPathError) as failure:
            render_template(case.template, case.input, allow_missing=case.allow_missing)
        assert case.error in str(failure.value)
        return
    out = render_template(case.template, case.input, allow_missing=case.allow_missing)
    if case.any_order:
        assert sorted(out.split()) == sorted(case.expect.split())
    else:
        assert out == case.expect


def test_the_table_covers_every_client_go_case() -> None:
    # client-go's jsonpath_test.go and parser_test.go hold 155 cases ("dict/" names three, here told apart).
    assert len(TABLE) == 155 and len({c.name for c in TABLE}) == len(TABLE)


# ----------------------------------------------------------------------------------------------- the engine's own


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (4.0, "4"),
        (-4.0, "-4"),
        (2.5, "2.5"),
        (0.1, "0.1"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (1.5e-7, "1.5e-07"),
        (100000.0, "100000"),
        (1000000.0, "1e+06"),
        (1234567.0, "1.234567e+06"),
        (1e21, "1e+21"),
        (0.0, "0"),
        (float("inf"), "+Inf"),
        (float("nan"), "NaN"),
    ],
)
def test_floats_print_as_go_prints_them(value: float, text: str) -> None:
    assert go_float(value) == text


def test_maps_and_lists_print_as_compact_json_with_sorted_keys_and_go_numbers() -> None:
    assert (
        go_json({"b": 1.0, "a": [1, 2.5, None, True], "c": "x<y&z"})
        == '{"a":[1,2.5,null,true],"b":1,"c":"x\\u003cy\\u0026z"}'
    )
    assert go_json([1e-7, 1e21, 1e16]) == "[1e-7,1e+21,10000000000000000]"
    assert render_template("{.a}", {"a": 1600000.0}) == "1.6e+06"
    assert render_template("{.a}", {"a": 1600000}) == "1600000"


def test_custom_column_cells_print_as_go_fmt_prints_them() -> None:
    assert go_sprint({"b": "x", "a": 1}) == "map[a:1 b:x]"
    assert go_sprint([1, "two", 3.0]) == "[1 two 3]"
    assert go_sprint(None) == "<nil>" and go_sprint(False) == "false"


def test_relaxed_paths_read_as_kubectl_reads_them() -> None:
    assert {relaxed(p) for p in ("name", ".name", "{name}", "{.name}")} == {"{.name}"}
    assert relaxed("metadata.labels.a\\.b") == "{.metadata.labels.a\\.b}"
    with pytest.raises(JSONPathError, match="unexpected path string"):
        relaxed("{.a}{.b}")
    assert value_at("metadata.name", {"metadata": {"name": "x"}}) == "x"
    assert value_at(".missing", {}) is None
    assert results(".items[*].n", {"items": [{"n": 1}, {"n": 2}]}) == [1, 2]


def test_quoted_unions_are_paths() -> None:
    assert render_template("{['bicycle.price', 'jsonpath']}", BOOKSTORE) == "9 J"
    assert render_template("{.items[*]['name','phase']}", {"items": [{"name": "a", "phase": "Active"}]}) == "a Active"


def test_dotted_label_keys_are_read_with_escaped_dots() -> None:
    item = {"fitLabels": {"shared-free-cards.fit.gpustack.ai/nvidia-a10g": "3"}}
    assert render_template("{.fitLabels.shared-free-cards\\.fit\\.gpustack\\.ai/nvidia-a10g}", item) == "3"
    assert render_template("{.fitLabels['shared-free-cards.fit']}", item) == ""


def test_unterminated_pieces_are_named() -> None:
    for template, message in (
        ('{"abc}', "unterminated quoted string"),
        ("{range .a}{.b}", "{range} without {end}"),
        ("{.a[?(@.x==1)}", "unclosed array expect ]"),
        ("{.a[x]}", "invalid array index x"),
        ("{.a[-]}", "array index - is not a number"),
    ):
        with pytest.raises(JSONPathError, match=message.replace("[", r"\[").replace("{", r"\{")):
            render_template(template, {"a": [1]})
