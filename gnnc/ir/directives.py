"""The words of each schedule directive, and the checks of them that the frontend and the pass options share.

The frontend checks a `schedule K for cpu { ... }` block word by word
(lang/sema.py) and points at the word at fault; a pass given the same
directive as an option (`tile-features{size=0}`) runs the same check on the
words the option stands for, so both refuse a bad value with one message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gnnc.errors import CompileError
from gnnc.ir.schedule import (
    CUDA_STRATEGIES,
    EDGE_LANES,
    EXCLUSIVE_DIRECTIVES,
    RELATION_FORMS,
    SIMD_WIDTHS,
    directive_keyword,
)


class DirectiveError(CompileError):
    """A directive whose words break its grammar: the message, and the index of the word at fault."""

    def __init__(self, message: str, word: int):
        super().__init__(message)
        self.message = message
        self.word = word


@dataclass(frozen=True)
class DirectiveWord:
    """One fixed word (``word``, or one of several), or a positive integer (``meaning`` says of what)."""

    word: str | tuple[str, ...] | None = None
    meaning: str = ""

    @property
    def words(self) -> tuple[str, ...]:
        return (self.word,) if isinstance(self.word, str) else self.word or ()


#: keyword -> the words after it.
CPU_DIRECTIVES: dict[str, tuple[DirectiveWord, ...]] = {
    "partition": (DirectiveWord("src"), DirectiveWord(meaning="the number of source partitions")),
    "tile": (DirectiveWord("features"), DirectiveWord(meaning="the feature tile size")),
    "parallel": (DirectiveWord("dst"),),
    "order": (DirectiveWord("edges"), DirectiveWord("hilbert")),
    "sort": (DirectiveWord("degree"),),
    "group": (DirectiveWord("neighbors"), DirectiveWord(meaning="the neighbour group size")),
    "reorder": (DirectiveWord(("locality", "rcm")),),
    "vectorize": (DirectiveWord(meaning="the vector width"),),
    # `vectorize edges W`: keyed apart from `vectorize W` (schedule.directive_keyword)
    "vectorize_edges": (DirectiveWord("edges"), DirectiveWord(meaning="the edges computed at once")),
    "prefetch": (DirectiveWord(meaning="the prefetch distance"),),
    "edges": (DirectiveWord("sorted"),),
    "stream": (DirectiveWord("outputs"),),
    "simd": (DirectiveWord(tuple(str(w) for w in SIMD_WIDTHS)),),
    "relations": (DirectiveWord(RELATION_FORMS),),
}
MAP_STRATEGIES = CUDA_STRATEGIES
#: ``map STRATEGY [group G] [tile T]``: options in any order, each at most once.
MAP_OPTIONS = {
    "group": "the thread group size",
    "tile": "the feature tile size",
    "lanes": "the lanes per destination or edge group, a power of two up to 32",
    "hybrid": "the most high-degree sources whose rows each block keeps in shared memory",
}
#: ``specialize NAME N [NAME N ...]``: the kernel compiled for these sizes of its dimensions.
DIRECTIVES = {"cpu": {*CPU_DIRECTIVES, "specialize"}, "cuda": {"map"}}


def directive_phrase(words: Sequence[str]) -> str:
    """How messages name a directive: its keyword and fixed words."""
    if words[0] == "map":
        return " ".join(words[:2])
    spec = CPU_DIRECTIVES.get(directive_keyword(words), ())
    fixed = [
        words[i] if i < len(words) and words[i] in a.words else a.words[0]
        for i, a in enumerate(spec, start=1)
        if a.word is not None
    ]
    return " ".join([words[0], *fixed])


def _one_of(words: tuple[str, ...]) -> str:
    quoted = [f"'{w}'" for w in words]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def check_positive_int(words: Sequence[str], i: int, meaning: str, after: str) -> None:
    """Word i is a positive integer of at most 9 digits."""
    word = words[i]
    if not word.isdigit() or not word.lstrip("0"):
        raise DirectiveError(f"expected a positive integer ({meaning}) after '{after}', found '{word}'", i)
    if len(word.lstrip("0")) > 9:
        raise DirectiveError(f"{word} is too large for {meaning}", i)


def check_cpu_directive(words: Sequence[str]) -> None:
    """The words of a CPU directive other than `specialize` (its keyword known) follow CPU_DIRECTIVES."""
    keyword = directive_keyword(words)
    spec = CPU_DIRECTIVES[keyword]
    for i, arg in enumerate(spec, start=1):
        after = " ".join(words[:i])
        if i >= len(words):
            want = _one_of(arg.words) if arg.word is not None else f"a positive integer ({arg.meaning})"
            raise DirectiveError(f"'{after}' needs {want} after it", i - 1)
        word = words[i]
        if arg.word is not None:
            if word not in arg.words:
                raise DirectiveError(f"expected {_one_of(arg.words)} after '{after}', found '{word}'", i)
        elif words[0] == "prefetch" and word == "0":
            pass  # `prefetch 0` turns prefetching off
        else:
            check_positive_int(words, i, arg.meaning, after)
            if keyword == "vectorize_edges" and int(word) not in EDGE_LANES:
                raise DirectiveError(f"'{after}' takes a power of two up to 64, found {word}", i)
    if len(words) > len(spec) + 1:
        extra = len(spec) + 1
        raise DirectiveError(f"unexpected '{words[extra]}' after '{' '.join(words[:extra])}'", extra)


def check_specialize_directive(words: Sequence[str], dims: Sequence[str] | None, kernel: str = "") -> None:
    """``specialize NAME N ...``: each name once, with a positive size; one of `dims`, the
    kernel's dimensions, where they are known (a pass option applies to every kernel)."""
    if dims is None:
        named = "a dimension of each kernel"
        example = "F"
    else:
        named = f"its dimensions: {', '.join(dims)}" if dims else "it has no named dimensions"
        example = dims[0] if dims else "F"
    if len(words) < 2:
        raise DirectiveError(
            f"'specialize' needs a dimension and its size after it, e.g. 'specialize {example} 32' ({named})", 0
        )
    seen: set[str] = set()
    for i in range(1, len(words), 2):
        name = words[i]
        if dims is not None and name not in dims:
            raise DirectiveError(f"'{name}' is not a dimension of kernel '{kernel}' ({named})", i)
        if name in seen:
            raise DirectiveError(f"'{name}' is given twice in 'specialize'", i)
        seen.add(name)
        if i + 1 >= len(words):
            raise DirectiveError(f"'{name}' needs a positive integer (its size) after it", i)
        check_positive_int(words, i + 1, f"the size of {name}", name)


def check_map_directive(words: Sequence[str]) -> list[tuple[str, int]]:
    """``map STRATEGY [OPTION N] ...``; returns each option with the index of its word."""
    choices = ", ".join(MAP_STRATEGIES)
    if len(words) < 2:
        raise DirectiveError(f"'map' needs a strategy after it ({choices})", 0)
    if words[1] not in MAP_STRATEGIES:
        raise DirectiveError(f"unknown thread mapping '{words[1]}' (expected one of {choices})", 1)
    options: list[tuple[str, int]] = []
    seen: set[str] = set()
    i = 2
    while i < len(words):
        option = words[i]
        if option not in MAP_OPTIONS:
            raise DirectiveError(f"unexpected '{option}' in 'map' (options: group G, tile T, lanes L, hybrid K)", i)
        if option in seen:
            raise DirectiveError(f"'{option}' is given twice in 'map'", i)
        seen.add(option)
        if i + 1 >= len(words):
            raise DirectiveError(f"'{option}' needs a positive integer ({MAP_OPTIONS[option]})", i)
        check_positive_int(words, i + 1, MAP_OPTIONS[option], option)
        if option == "lanes" and words[i + 1].lstrip("0") not in ("1", "2", "4", "8", "16", "32"):
            raise DirectiveError(f"'lanes' must be a power of two up to 32 (the warp), found '{words[i + 1]}'", i + 1)
        options.append((option, i))
        i += 2
    return options


def exclusion(keyword: str, given: Sequence[str]) -> tuple[str, str] | None:
    """(the first of `given` that directive `keyword` cannot join, why), or None.

    The frontend refuses such a schedule; a pass option that would give a
    kernel such a pair is refused the same way."""
    others, why = EXCLUSIVE_DIRECTIVES.get(keyword, ((), ""))
    other = next((k for k in given if k in others), None)
    if other is not None:
        return other, why
    for k in given:
        k_others, k_why = EXCLUSIVE_DIRECTIVES.get(k, ((), ""))
        if keyword in k_others:
            return k, k_why
    return None


def directive_words(key: str, value: str) -> list[str]:
    """A `graph.schedule` entry (`cpu.vectorize_edges` = `edges 16`) as its directive's words."""
    keyword = key.partition(".")[2]
    return [keyword.partition("_")[0], *value.split()]


def with_directives(
    kernel: str, entries: dict[str, str], directives: Sequence[Sequence[str]], given_as: str
) -> dict[str, str]:
    """A kernel's `graph.schedule` entries (`cpu.KEYWORD` -> the words after it) with these CPU
    directives given too, each replacing one of its keyword, as if the kernel's schedule
    said so; a pair the frontend would refuse in one schedule is refused, naming `given_as`
    (the pass and its options)."""
    result = dict(entries)
    for words in directives:
        result[f"cpu.{directive_keyword(words)}"] = " ".join(words[1:])
    given = [k.partition(".")[2] for k in result if k.startswith("cpu.")]
    for words in directives:
        keyword = directive_keyword(words)
        found = exclusion(keyword, [k for k in given if k != keyword])
        if found is not None:
            other, why = found
            other_words = directive_words(f"cpu.{other}", result[f"cpu.{other}"])
            raise CompileError(
                f"{given_as}: '{directive_phrase(words)}' cannot be combined with "
                f"'{directive_phrase(other_words)}' (the schedule of kernel '{kernel}'): {why}"
            )
    return result


def check_directive_option(given_as: str, words: Sequence[str]) -> None:
    """The words a pass option stands for follow their directive's grammar; else the
    frontend's message for them, after `given_as` (the pass and its options)."""
    try:
        if words[0] == "map":
            check_map_directive(words)
        elif words[0] == "specialize":
            check_specialize_directive(words, None)
        else:
            check_cpu_directive(words)
    except DirectiveError as exc:
        raise CompileError(f"{given_as}: {exc.message}") from None
