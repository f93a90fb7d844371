"""PyTorch products whose rounding does not depend on the batch (issue 17):
``backends/torch/ordered.py`` against ``torch.nn.functional.linear`` and ``@`` (values to
rounding, one row's bits the same alone, in any batch and under ``vmap``, for the
values and for autograd's input gradients), which networks get them (kinked right-hand
sides only) and the end-to-end consequence on suite case 038
(``test_batched_experiments_torch.py``)."""

from __future__ import annotations

import pytest

from petab_sciml.network import Network
from tests.support.suite import requires_suite

torch = pytest.importorskip("torch")

from torch.func import vmap  # noqa: E402

from petab_sciml.backends.torch.ordered import (  # noqa: E402
    OrderedLinear,
    order_small_products,
    ordered_linear,
    small_matmul,
)
from petab_sciml.batch_invariance import (  # noqa: E402
    ORDERED_PRODUCT_MAX_IN,
    ORDERED_PRODUCT_MAX_WEIGHTS,
    takes_ordered_product,
)

DT = torch.float64
SHAPES = [(5, 4), (10, 5), (1, 10), (3, 1), (50, 20), (16, 64), (96, 5)]   # (out, in)
BATCHES = [2, 3, 8, 17, 100, 1000]


def _rows_alone(fn, x, *args):
    return torch.stack([fn(x[r], *args) for r in range(x.shape[0])])


@pytest.mark.parametrize("out_features, in_features", SHAPES)
def test_ordered_linear_is_linear_and_batch_invariant(out_features, in_features):
    assert takes_ordered_product(in_features, out_features * in_features)
    gen = torch.Generator().manual_seed(out_features * 100 + in_features)
    w = torch.randn((out_features, in_features), generator=gen, dtype=DT)
    b = torch.randn((out_features,), generator=gen, dtype=DT)
    for n in BATCHES:
        x = torch.randn((n, in_features), generator=gen, dtype=DT)
        y = ordered_linear(x, w, b)
        expected = torch.nn.functional.linear(x, w, b)
        assert float((y - expected).abs().max()) <= 1e-13 * max(1.0, float(expected.abs().max()))
        assert torch.equal(y, _rows_alone(ordered_linear, x, w, b))          # bit for bit
        assert torch.equal(y[:1], ordered_linear(x[:1], w, b))               # a batch of one
        # per-row copies of the weight under vmap (the forward-sensitivity Jacobians)
        per_row = vmap(ordered_linear)(x, w.expand(n, -1, -1).clone(), b.expand(n, -1))
        assert torch.equal(per_row, y)
        # autograd's input gradient (a network's Jacobian rows): the same bits per row
        xg = x.clone().requires_grad_(True)
        cot = torch.randn((n, out_features), generator=gen, dtype=DT)
        (g,) = torch.autograd.grad((ordered_linear(xg, w, b) * cot).sum(), xg)
        alone = []
        for r in range(n):
            xr = x[r].clone().requires_grad_(True)
            alone.append(torch.autograd.grad((ordered_linear(xr, w, b) * cot[r]).sum(),
                                             xr)[0])
        assert torch.equal(g, torch.stack(alone))
        assert float((g - cot @ w).abs().max()) <= 1e-13 * max(1.0, float(g.abs().max()))


def test_ordered_linear_gradients_are_the_products():
    gen = torch.Generator().manual_seed(1)
    w = torch.randn((6, 4), generator=gen, dtype=DT, requires_grad=True)
    b = torch.randn((6,), generator=gen, dtype=DT, requires_grad=True)
    x = torch.randn((9, 4), generator=gen, dtype=DT, requires_grad=True)
    cot = torch.randn((9, 6), generator=gen, dtype=DT)
    got = torch.autograd.grad((ordered_linear(x, w, b) * cot).sum(), (x, w, b))
    ref = torch.autograd.grad((torch.nn.functional.linear(x, w, b) * cot).sum(), (x, w, b))
    for a, r in zip(got, ref):
        assert float((a - r).abs().max()) <= 1e-13


@pytest.mark.parametrize("n, k, m", [(1, 4, 3), (5, 1, 91), (3, 10, 2), (7, 64, 7)])
def test_small_matmul_is_matmul_and_batch_invariant(n, k, m):
    gen = torch.Generator().manual_seed(n * k * m)
    for batch in (2, 5, 64):
        a = torch.randn((batch, n, k), generator=gen, dtype=DT)
        b = torch.randn((batch, k, m), generator=gen, dtype=DT)
        got = small_matmul(a, b)
        assert float((got - a @ b).abs().max()) <= 1e-13 * max(1.0, float((a @ b).abs().max()))
        assert torch.equal(got, torch.stack([small_matmul(a[i], b[i]) for i in range(batch)]))
    # beyond the limits: the library product itself
    a = torch.randn((3, ORDERED_PRODUCT_MAX_IN + 1), generator=gen, dtype=DT)
    b = torch.randn((ORDERED_PRODUCT_MAX_IN + 1, 2), generator=gen, dtype=DT)
    assert torch.equal(small_matmul(a, b), a @ b)


def test_order_small_products_swaps_plain_linear_layers_only():
    class Scaled(torch.nn.Linear):   # a subclass with a forward of its own stays
        def forward(self, x):
            return 2 * super().forward(x)

    big_in = ORDERED_PRODUCT_MAX_IN + 1
    model = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.ReLU(), Scaled(5, 5),
                                torch.nn.Linear(5, big_in), torch.nn.Linear(big_in, 2),
                                torch.nn.Linear(40, 40)).to(DT)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    plain = [torch.nn.Linear(4, 5).to(DT)]
    plain[0].load_state_dict(model[0].state_dict())
    assert order_small_products(model) == 4
    assert [type(m).__name__ for m in model] == ["OrderedLinear", "ReLU", "Scaled",
                                                "OrderedLinear", "OrderedLinear",
                                                "OrderedLinear"]
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())
    x = torch.randn((8, 4), dtype=DT)
    with torch.no_grad():
        assert float((model[0](x) - plain[0](x)).abs().max()) <= 1e-14
    # too many inputs (65) or weights (1,600 > 1,024): torch's own product, bit for bit
    assert not takes_ordered_product(big_in, 2 * big_in)
    assert not takes_ordered_product(40, 1600) and 1600 > ORDERED_PRODUCT_MAX_WEIGHTS
    h = torch.randn((8, big_in), dtype=DT)
    assert torch.equal(model[4](h), torch.nn.functional.linear(h, model[4].weight,
                                                               model[4].bias))
    assert isinstance(model[4], OrderedLinear)


# ------------------------------------------------------------------ which networks
def _net(activation: str, kind: str = "call_function") -> Network:
    layers = [{"layer_id": "l1", "layer_type": "Linear",
               "args": {"in_features": 2, "out_features": 3}}]
    act = ({"name": "a", "op": "call_function", "target": activation, "args": ["h"]}
           if kind == "call_function" else
           {"name": "a", "op": "call_module", "target": "act", "args": ["h"]})
    if kind == "call_module":
        layers.append({"layer_id": "act", "layer_type": activation, "args": {}})
    nodes = [{"name": "x", "op": "placeholder", "target": "x"},
             {"name": "h", "op": "call_module", "target": "l1", "args": ["x"]}, act,
             {"name": "output", "op": "output", "target": "output", "args": ["a"]}]
    return Network.build("nn", ["x"], layers, nodes)


def test_network_smoothness_from_the_catalogue():
    from petab_sciml import catalogue

    assert catalogue.SMOOTH_LAYERS <= set(catalogue.LAYERS)
    assert catalogue.SMOOTH_FUNCTIONS <= set(catalogue.FUNCTIONS)
    for fn in ("tanh", "sigmoid", "softplus", "gelu"):
        assert _net(fn).smooth, fn
    for fn in ("relu", "leaky_relu", "hardtanh", "abs", "elu"):
        assert not _net(fn).smooth, fn
    assert _net("Tanh", "call_module").smooth
    assert not _net("ReLU", "call_module").smooth
    assert catalogue.layer_is_smooth("RNN", {"nonlinearity": "tanh"})
    assert not catalogue.layer_is_smooth("RNN", {"nonlinearity": "relu"})


def _suite_case(name: str):
    from tests.simulation.test_official_suite import CASES

    return next(p for p in CASES if (p.parent.name, p.name) == ("sciml_problem_import", name))


@requires_suite
@pytest.mark.parametrize("case, kinked", [("038", True), ("036", True), ("001", False)])
def test_executor_orders_products_where_the_right_hand_side_has_kinks(case, kinked):
    """Auto: ordered products for ReLU networks in the right-hand side (036, 038), the
    library's for a smooth one (001, tanh); ``ordered_products`` overrides."""
    from petab_sciml.problem import load_problem
    from petab_sciml.testcases import load_problem_case

    problem = load_problem(load_problem_case(_suite_case(case)).problem, backend="torch")
    ex = problem.simulator().executor
    assert ex.plan.rhs_smooth is not kinked
    assert ex.ordered_products is kinked

    def kinds(executor):
        return {type(m).__name__ for module in executor.modules for m in module.modules()
                if isinstance(m, torch.nn.Linear)}

    assert kinds(ex) == ({"OrderedLinear"} if kinked else {"Linear"})
    forced = problem.simulator(ordered_products=not kinked).executor
    assert kinds(forced) == ({"Linear"} if kinked else {"OrderedLinear"})
