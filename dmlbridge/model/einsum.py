"""Which DirectML operator ONNX Runtime's DirectML provider runs an Einsum as, from its equation alone, and so how
each of its inputs is bound (``DmlOperatorEinSum.cpp``; the forms are ``EinSumHelper``'s, in ``OperatorHelper.cpp``).

The provider numbers the equation's labels in the order they first appear (an equation without ``->`` has as output
the labels that appear once, in ASCII order), then takes an equation of one input whose output has its labels in
its order (*identity*), another order (*transpose*) or none (*reduce*), of two inputs and an output with one
labelling (*multiply*), or one of these, by label numbers and ranks:

=================  ==========================================================================================
form               equations
=================  ==========================================================================================
matmul             ``ij,jk->ik``, ``bij,bjk->bik``, ``abij,abjk->abik``
outer              ``i,j->ij``
matmul-a           ``ji,jk->ik`` and its batched forms of 3 and 4 dimensions
matmul-b           ``ij,kj->ik`` and its batched forms; ``i,i->`` (an inner product)
matmul-nhcw        ``aibj,ajbk->aibk``, ``ajbi,ajbk->aibk``, ``aibj,akbj->aibk``
reduce             ``ij->i``, ``ij->j``
=================  ==========================================================================================

Any other equation (an ellipsis, three inputs, ``bij,jk->bik``) is not taken: the node runs on the CPU. The matrix
products bind both inputs to GEMM and the multiply to ELEMENT_WISE_MULTIPLY, each with leading 1s to 4 dimensions
(the provider's default for its tensors); the other forms see their input through strides of a permutation, which
dmlbridge does not lay out.

    >>> einsum_form("ij,kj->ik"), einsum_form("bij,jk->bik"), einsum_form("i,j")
    ('matmul-b', None, 'outer')
"""

from __future__ import annotations

__all__ = ["EINSUM_BOUND", "einsum_form"]

# (form, ranks of the inputs and output, label numbers of them all in order)
_FORMS: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...] = (
    ("matmul", (2, 2, 2), (0, 1, 1, 2, 0, 2)),
    ("matmul", (3, 3, 3), (0, 1, 2, 0, 2, 3, 0, 1, 3)),
    ("matmul", (4, 4, 4), (0, 1, 2, 3, 0, 1, 3, 4, 0, 1, 2, 4)),
    ("outer", (1, 1, 2), (0, 1, 0, 1)),
    ("matmul-a", (2, 2, 2), (0, 1, 0, 2, 1, 2)),
    ("matmul-a", (3, 3, 3), (0, 1, 2, 0, 1, 3, 0, 2, 3)),
    ("matmul-a", (4, 4, 4), (0, 1, 2, 3, 0, 1, 2, 4, 0, 1, 3, 4)),
    ("matmul-b", (2, 2, 2), (0, 1, 2, 1, 0, 2)),
    ("matmul-b", (3, 3, 3), (0, 1, 2, 0, 3, 2, 0, 1, 3)),
    ("matmul-b", (4, 4, 4), (0, 1, 2, 3, 0, 1, 4, 3, 0, 1, 2, 4)),
    ("matmul-b", (1, 1, 0), (0, 0)),
    ("matmul-nhcw", (4, 4, 4), (0, 1, 2, 3, 0, 3, 2, 4, 0, 1, 2, 4)),
    ("matmul-nhcw", (4, 4, 4), (0, 1, 2, 3, 0, 1, 2, 4, 0, 3, 2, 4)),
    ("matmul-nhcw", (4, 4, 4), (0, 1, 2, 3, 0, 4, 2, 3, 0, 1, 2, 4)),
    ("reduce", (2, 1), (0, 1, 0)),
    ("reduce", (2, 1), (0, 1, 1)),
)

EINSUM_BOUND = {"matmul": "GEMM", "matmul-a": "GEMM", "matmul-b": "GEMM", "multiply": "ELEMENT_WISE_MULTIPLY"}
"""The forms whose inputs dmlbridge lays out (leading 1s to 4 dimensions), and the operator that binds them; the
outer product's B too (``[1, 1, 1, j]``; its A is ``[1, 1, i, 1]``)."""


def einsum_form(equation: str) -> str | None:
    """The form the provider runs ``equation`` as (see the module docstring); None where it does not take it."""
    labels: dict[str, int] = {}
    components: list[list[int]] = [[]]
    seen: dict[str, int] = {}
    output = False
    text = equation.replace(" ", "")
    k = 0
    while k < len(text):
        char = text[k]
        if char.isascii() and char.isalpha():
            labels.setdefault(char, len(labels))
            seen[char] = seen.get(char, 0) + 1
            components[-1].append(labels[char])
        elif char == "," and not output:
            components.append([])
        elif text.startswith("->", k) and not output:
            output = True
            components.append([])
            k += 1
        else:
            return None  # (an ellipsis, or what the provider refuses)
        k += 1
    if not output:  # the labels that appear once, in ASCII order
        components.append([labels[char] for char in sorted(labels) if seen[char] == 1])
    if len(components) == 2:
        given, made = components
        if len(given) == len(made):
            return "identity" if given == made else "transpose"
        return "reduce" if not made else _listed(components)
    if len(components) == 3 and components[0] == components[1] == components[2]:
        return "multiply"
    return _listed(components) if len(components) <= 3 else None


def _listed(components: list[list[int]]) -> str | None:
    ranks = tuple(len(component) for component in components)
    numbers = tuple(number for component in components for number in component)
    return next((form for form, want_ranks, want in _FORMS if want == numbers and want_ranks == ranks), None)
