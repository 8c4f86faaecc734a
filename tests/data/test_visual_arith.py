"""The visual arithmetic task (``data.synthetic.images``): each image shows its two numbers'
glyphs where its key says, the question names only the operation, and the validation set is
disjoint from the training set."""

import numpy as np

from rlcore.data.visual_arith import GLYPHS, SCALE, SIDE, visual_problems


def read_digit(image, x, y):
    """The digit whose 3x5 glyph (from the table, by hand) is drawn at (x, y), or None."""
    cell = image[y : y + 5 * SCALE : SCALE, x : x + 3 * SCALE : SCALE, 0] > 0
    for digit, rows in GLYPHS.items():
        if (cell == np.array([[c == "#" for c in row] for row in rows])).all():
            return digit
    return None


def test_each_image_shows_its_numbers_and_the_answer_is_in_the_image_alone():
    rows = visual_problems(300, operations=["+", "*"], seed=3)
    questions = {r["question"] for r in rows}
    assert questions == {
        "<image>What is the sum of the two numbers in the image?",
        "<image>What is the product of the two numbers in the image?",
    }
    for row in rows:
        a, op, b, (lx, ly, rx, ry) = row["key"]
        image = row["image"]
        assert image.shape == (SIDE, SIDE, 3) and image.dtype == np.uint8
        assert read_digit(image, lx, ly) == a and read_digit(image, SIDE // 2 + rx, ry) == b
        lit = sum(c == "#" for g in (GLYPHS[a], GLYPHS[b]) for r in g for c in r)
        assert (image[..., 0] > 0).sum() == lit * SCALE * SCALE  # nothing else drawn
        assert row["answer"] == f"#### {a + b if op == '+' else a * b}"
    # the same arguments, the same rows; the validation draw leaves the training keys out
    again = visual_problems(300, operations=["+", "*"], seed=3)
    assert [r["key"] for r in again] == [r["key"] for r in rows]
    val = visual_problems(50, operations=["+", "*"], seed=4, exclude={r["key"] for r in rows})
    assert not {r["key"] for r in val} & {r["key"] for r in rows}
