"""Figure labels: long machine names wrapped where a name allows, worked out by hand."""

from __future__ import annotations

from simsched.analysis.labels import chars_across, wrap_label


def test_a_name_that_fits_stays_on_one_line():
    assert wrap_label("haswell-e5-2695v3", 20) == "haswell-e5-2695v3"


def test_a_scaled_machine_breaks_after_its_commas_and_colon():
    assert wrap_label("scaled:base=epyc-7742-2s,sockets=16,cores=64", 20) == \
        "scaled:\nbase=epyc-7742-2s,\nsockets=16,cores=64"


def test_overrides_break_before_their_bracket_and_a_long_key_after_its_dot():
    assert wrap_label("haswell-e5-2695v3[latency_ns.socket_hop=150]", 17) == \
        "haswell-e5-2695v3\n[latency_ns.\nsocket_hop=150]"


def test_a_piece_with_no_break_is_cut_hard_and_the_width_is_at_least_eight():
    assert wrap_label("abcdefghijkl", 3) == "abcdefgh\nijkl"


def test_lines_already_broken_are_kept_apart():
    assert wrap_label("one\ntwo", 20) == "one\ntwo"


def test_characters_across_follow_the_inches_and_the_font_size():
    # 2 inches of 10-point text: 144 points over 6-point glyphs.
    assert chars_across(2, 10) == 24
    assert chars_across(0.1, 10) == 8
