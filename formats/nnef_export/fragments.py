"""NNEF fragments the writer declares for the operations NNEF's standard lacks, in the
order they are written at the top of ``graph.nnef``.  A writer that uses one adds its
name to ``_Writer.fragments``."""

from __future__ import annotations

_MVN_FRAGMENT = """fragment mean_variance_normalization(
    input: tensor<scalar>,
    scale: tensor<scalar>,
    offset: tensor<scalar>,
    axes: integer[],
    epsilon: scalar = 1e-5 )
-> ( output: tensor<scalar> )
{
    mean, variance = moments(input, axes = axes);
    output = scale * (input - mean) / sqrt(variance + epsilon) + offset;
}
"""
"""nnef_tools' normalization by the statistics over ``axes`` (BatchNorm without running
statistics, InstanceNorm)."""

_ERF_FRAGMENT = """fragment erf( x: tensor<scalar> ) -> ( y: tensor<scalar> )
{
    t = 1.0 / (1.0 + 0.3275911 * abs(x));
    p = ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t
         + 0.254829592) * t;
    y = sign(x) * (1.0 - p * exp(-x * x));
}
"""
"""NNEF has no erf; like nnef_tools, the writer declares it as a fragment whose body is
Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7), so tools that lower fragments can
run it and tools that know erf (our reader among them) keep it exact."""

FRAGMENTS = {"mean_variance_normalization": _MVN_FRAGMENT, "erf": _ERF_FRAGMENT}
