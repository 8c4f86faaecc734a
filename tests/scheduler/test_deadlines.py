"""The driver's deadline for a worker's answer: the floor, or 10x the slowest such call; a
method's first call (or an unnamed one) at least FIRST_CALL_S."""

from rlcore.scheduler.deadlines import FACTOR, FIRST_CALL_S, Deadlines


def test_a_call_waits_the_floor_or_ten_times_the_slowest_such_call():
    deadlines = Deadlines(floor_s=4.0)
    assert deadlines.limit("update") == FIRST_CALL_S  # no history yet: models load, compile
    deadlines.record("update", 0.1)
    assert deadlines.limit("update") == 4.0  # 10 x 0.1 < the floor
    deadlines.record("update", 2.0)
    deadlines.record("update", 0.5)  # the slowest counts
    assert deadlines.limit("update") == FACTOR * 2.0 == 20.0
    assert deadlines.limit("collect") == FIRST_CALL_S  # per method
    assert deadlines.limit(None) == FIRST_CALL_S
    assert Deadlines(floor_s=1800.0).limit("update") == 1800.0  # the floor, when higher
