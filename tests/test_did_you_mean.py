from rlcore.did_you_mean import closest, did_you_mean


def test_close_match_is_suggested():
    assert did_you_mean("clip_ratio_hi", ["clip_ratio_high", "gamma"]) == (
        " (did you mean 'clip_ratio_high'?)"
    )


def test_nothing_is_suggested_when_nothing_is_close():
    assert did_you_mean("zzz", ["gamma", "lam"]) == ""
    assert closest("zzz", []) == []
