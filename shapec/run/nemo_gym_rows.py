"""NeMo-Gym result rows -> the arrays of `shapec.compat.nemo_rl`, read as NeMo-RL reads them.

Where NeMo-RL's own code would stop with a bare KeyError or TypeError (a row without `full_result`,
a string reward, a `None` text, string `profiled_rewards`), this raises a BatchError that names
the row and the field; a malformed `profile_band` channel, which NeMo-RL silently skips or applies
as given, is refused the same way. Nothing is mutated before every row has been read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir.nodes import MAX_EXACT_INT
from ..runtime.validate import BatchError, as_array, band, finite, flag, numeric, plain_number, show

CHANNELS = ("total", "reasoning", "answer")


def _get(obj: Any, key: str, default: Any) -> Any:
    return obj.get(key, default) if isinstance(obj, dict) else getattr(obj, key, default)


def _text(part: Any, where: str) -> str:
    text = _get(part, "text", "")
    if not isinstance(text, str):
        raise BatchError(f"{where}.text: expected a string, got {show(text)}")
    return text


def _items(obj: Any, key: str, where: str) -> list:
    items = _get(obj, key, [])
    if not isinstance(items, (list, tuple)):
        raise BatchError(f"{where}.{key}: expected a list, got {show(items)}")
    return list(items)


def response_texts(result: Any, where: str = "result") -> tuple[str, str]:
    """(reasoning, answer) text of one NeMo-Gym result row: the model's own output only.

    Reasoning is the concatenated summary text of `reasoning` items; the answer is the text of
    `message` items whose role is assistant or absent (user-role env observations are skipped).
    Items may be dicts or objects with attributes; a text that is not a string is a BatchError
    naming it from `where` (from the row itself when `where` is empty).
    """
    full = result.get("full_result", {})
    response = full.get("response", {})
    base = f"{where}.full_result.response" if where else "full_result.response"
    reasoning: list[str] = []
    answer: list[str] = []
    for k, item in enumerate(_items(response, "output", base)):
        at = f"{base}.output[{k}]"
        kind = _get(item, "type", "")
        if kind == "reasoning":
            reasoning.extend(_text(part, f"{at}.summary[{j}]") for j, part in enumerate(_items(item, "summary", at)))
        elif kind == "message":
            if _get(item, "role", None) not in (None, "assistant"):
                continue
            content = _get(item, "content", [])
            if isinstance(content, list):
                answer.extend(_text(part, f"{at}.content[{j}]") for j, part in enumerate(content))
            elif isinstance(content, str):
                answer.append(content)
    return "".join(reasoning), "".join(answer)


def length_of(text: str, length_type: str, tokenizer: Any = None) -> int:
    """Tokens (without special tokens; 0 for empty text) or characters; chars when no tokenizer."""
    if length_type == "tokens" and tokenizer is not None:
        return token_counts(tokenizer, [text])[0]
    return len(text)


def token_counts(tokenizer: Any, texts: list[str]) -> list[int]:
    """Each text's tokens without special tokens, as `tokenizer.encode(text, add_special_tokens=False)`
    counts them (0 for an empty text, which is never encoded). A Hugging Face tokenizer is called
    once on the whole list (its batch is the same encoding, run in Rust on every core); a tokenizer
    that only has `encode` is asked text by text."""
    at = [k for k, text in enumerate(texts) if text]
    counts = [0] * len(texts)
    if not at:
        return counts
    if callable(tokenizer):
        ids = tokenizer([texts[k] for k in at], add_special_tokens=False)["input_ids"]
    else:
        ids = [tokenizer.encode(texts[k], add_special_tokens=False) for k in at]
    for k, tokens in zip(at, ids):
        counts[k] = len(tokens)
    return counts


def _plain_char_lengths(row: dict) -> tuple[int, int] | None:
    """response_texts' character counts without building the strings: a fast path for plain dict rows.

    Returns None (use response_texts) on anything unusual: a missing key, an object item, a text that
    is not a string. Walking the dicts is memory-bound, so this path avoids method calls and copies.
    """
    reasoning = answer = 0
    try:
        for item in row["full_result"]["response"]["output"]:
            kind = item["type"]
            if kind == "reasoning":
                for part in item["summary"]:
                    text = part["text"]
                    if text.__class__ is not str:
                        return None
                    reasoning += len(text)
            elif kind == "message":
                role = item.get("role")
                if role is not None and role != "assistant":
                    continue
                content = item["content"]
                if isinstance(content, list):
                    for part in content:
                        text = part["text"]
                        if text.__class__ is not str:
                            return None
                        answer += len(text)
                elif isinstance(content, str):
                    answer += len(content)
    except (KeyError, TypeError, AttributeError):
        return None
    return reasoning, answer


def has_components(value: Any, where: str) -> bool:
    """Whether a row lists reward components: a non-empty list, dict or array (any length counts,
    so [0.0] is one component), or a nonzero count."""
    value = as_array(where, value)
    if isinstance(value, np.ndarray) and value.ndim:
        return value.size > 0
    try:
        return len(value) > 0
    except TypeError:  # a number or scalar: a count
        return flag(value, where)


@dataclass
class Rows:
    """What the drop-in reads from every row, in one pass (read_rows)."""

    fulls: list[dict]
    rewards: np.ndarray
    agents: list[str | None]
    components: np.ndarray  # 1 where the row lists reward components
    low_effort: np.ndarray  # 1 where low_effort_applied is set
    deferred: list[BatchError]  # the first bad reward_components, then the first bad low_effort_applied
    chars: tuple[np.ndarray, np.ndarray]  # reasoning and answer characters (NaN: not a plain row, see row_lengths)


def read_rows(results: Sequence[Any]) -> Rows:
    """Every row's `full_result`, reward, agent name, reward components and low-effort flag, in one
    pass (NeMo-RL reads them all from every row). A row that is not a result, a reward that is no
    number or an agent that is no name stops it at that row; a bad component list or flag is kept
    for the caller to raise after the agents' params are known, as NeMo-RL's order of reading has it.
    The plain values (None, a bool, a list) are read here; any other goes to has_components and
    flag, which word the error."""
    fulls, rewards, agents, reasoning, answer = [], [], [], [], []
    n = len(results)
    components, low_effort = np.zeros(n), np.zeros(n)
    bad_components = bad_flag = None
    for i, row in enumerate(results):
        if type(row) is not dict and not isinstance(row, Mapping):
            raise BatchError(f"results[{i}]: expected a NeMo-Gym result dict, got {type(row).__name__}")
        full = row.get("full_result")
        if not isinstance(full, dict):
            raise BatchError(f"results[{i}].full_result: expected a dict with 'reward', got {show(full)}")
        if "reward" not in full:
            raise BatchError(f"results[{i}].full_result.reward: missing")
        reward = full["reward"]
        if type(reward) is not float and type(reward) is not int and (
                isinstance(reward, (bool, np.bool_)) or not isinstance(reward, (int, float, np.integer, np.floating))):
            raise BatchError(f"results[{i}].full_result.reward: expected a number, got {show(reward)}")
        ref = row.get("agent_ref")
        if type(ref) is not dict and not isinstance(ref, Mapping) or "name" not in ref:
            raise BatchError(f"results[{i}].agent_ref.name: missing (agent_ref={show(ref)}); expected the agent's name")
        name = ref["name"]
        if name is not None and type(name) is not str and not isinstance(name, str):
            raise BatchError(f"results[{i}].agent_ref.name: expected the agent's name (a string), got {show(name)}")
        fulls.append(full)
        rewards.append(reward)
        agents.append(name)
        listed = full.get("reward_components")
        if listed is None:
            pass
        elif type(listed) in (list, tuple, dict):
            components[i] = len(listed) > 0
        elif bad_components is None:
            try:
                components[i] = has_components(listed, f"results[{i}].full_result.reward_components")
            except BatchError as err:
                bad_components = err
        counted = _plain_char_lengths(row)
        reasoning.append(math.nan if counted is None else counted[0])
        answer.append(math.nan if counted is None else counted[1])
        low = row.get("low_effort_applied")
        if low is True:
            low_effort[i] = 1.0
        elif low is not None and low is not False and bad_flag is None:
            try:
                low_effort[i] = flag(low, f"results[{i}].low_effort_applied")
            except BatchError as err:
                bad_flag = err
    values = finite("full_result.reward", numeric("full_result.reward", rewards))
    deferred = [err for err in (bad_components, bad_flag) if err is not None]
    chars = (np.array(reasoning, dtype=np.float64), np.array(answer, dtype=np.float64))
    return Rows(fulls, values, agents, components, low_effort, deferred, chars)


def row_lengths(results, starts: range, group_size: int, per_group, tokenizer,
                chars: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Reasoning and answer lengths per row, in each group's length_type (0 in disabled groups):
    the characters read_rows counted, and text_lengths only for tokens and for the rows it could
    not count (the first bad text raises)."""
    n = len(results)
    sizes = np.diff([*starts, n])
    enabled = np.repeat([bool(p["enabled"]) for p in per_group], sizes)
    tokens = np.repeat([p["length_type"] == "tokens" and tokenizer is not None for p in per_group], sizes)
    reasoning, answer = np.where(enabled, chars[0], 0.0), np.where(enabled, chars[1], 0.0)
    reread = np.flatnonzero(enabled & (tokens | np.isnan(reasoning))).tolist()
    counted = text_lengths([results[i] for i in reread], [f"results[{i}]" for i in reread], tokens[reread].tolist(),
                           tokenizer)
    for i, pair in zip(reread, counted):
        if isinstance(pair, Exception):
            raise pair
        reasoning[i], answer[i] = pair
    return reasoning, answer


def text_lengths(rows: Sequence[Any], wheres: Sequence[str], tokens: Sequence[bool], tokenizer: Any
                 ) -> list[tuple[int, int] | Exception]:
    """The (reasoning, answer) lengths of each row's response texts (response_texts, naming the row
    `wheres[i]`): in tokens where `tokens[i]`, every text counted in one batched tokenizer call
    (token_counts), else in characters. A row whose texts cannot be read gets the error instead,
    for the caller to raise (the drop-ins) or to report against that row (`shapec run`)."""
    out: list[tuple[int, int] | Exception] = [(0, 0)] * len(rows)
    by_tokens: list[tuple[int, tuple[str, str]]] = []
    for i, (row, where, tok) in enumerate(zip(rows, wheres, tokens)):
        counted = None if tok or type(row) is not dict else _plain_char_lengths(row)
        if counted is not None:
            out[i] = counted
            continue
        try:
            texts = response_texts(row, where)
        except (ValueError, TypeError, AttributeError, RecursionError) as err:  # a BatchError names the text
            out[i] = err
            continue
        if tok:
            by_tokens.append((i, texts))
        else:
            out[i] = (len(texts[0]), len(texts[1]))
    counts = iter(token_counts(tokenizer, [text for _, pair in by_tokens for text in pair]))
    for i, _ in by_tokens:
        out[i] = (next(counts), next(counts))
    return out


def _row_bands(row: Mapping, i: int) -> dict[str, tuple[float, float, float, float]]:
    """A row's listed band channels as (a, b, f, 1); every listed channel must be a valid band.

    NeMo-RL lets a listed channel shadow the global band even when it is malformed (and applies an
    f outside [0, 1] as given); here a listed channel that is not a band is an error.
    """
    block = row.get("profile_band")
    if block is None or (isinstance(block, dict) and not block):
        return {}
    if not isinstance(block, dict):
        raise BatchError(f"results[{i}].profile_band: expected a mapping of channel -> {{a, b, f}}, got {show(block)}")
    return {ch: _plain_band(block[ch]) or (*band(f"results[{i}].profile_band.{ch}", block[ch]), 1.0)
            for ch in CHANNELS if ch in block}


def _plain_band(value: Any) -> tuple[float, float, float, float] | None:
    """{a, b, f} of plain finite numbers with a < b and 0 <= f <= 1 as (a, b, f, 1); None for anything
    else, which band() then checks and words."""
    if type(value) is not dict or len(value) != 3:
        return None
    a, b, f = plain_number(value.get("a")), plain_number(value.get("b")), plain_number(value.get("f"))
    if a is None or b is None or f is None or not (a < b and 0 <= f <= 1):
        return None
    return a, b, f, 1.0


def _profiled(row: Mapping, i: int) -> tuple[np.ndarray, np.ndarray]:
    """A row's profiled rewards and lengths, zipped as NeMo-RL zips them (the shorter list decides)."""
    pr, pl = row.get("profiled_rewards"), row.get("profiled_output_lengths")
    if pr is None or pl is None:
        return np.zeros(0), np.zeros(0)
    rewards = finite(f"results[{i}].profiled_rewards", numeric(f"results[{i}].profiled_rewards", pr))
    lengths = finite(f"results[{i}].profiled_output_lengths",
                     numeric(f"results[{i}].profiled_output_lengths", pl), "lengths")
    k = min(len(rewards), len(lengths))
    return rewards[:k], lengths[:k]


def _all_profiled(results: list, starts: range) -> tuple[list[int], np.ndarray, np.ndarray]:
    """Every group's profiled rollouts (sizes, rewards, lengths), as _profiled reads each group's first
    row: groups of plain lists in one conversion and one check, any other (or a check that fails) group
    by group, where _profiled words the error."""
    rewards, lengths, sizes = [], [], []
    for s in starts:
        row = results[s]
        pr, pl = row.get("profiled_rewards"), row.get("profiled_output_lengths")
        if pr is None or pl is None:
            sizes.append((0, 0))
        elif type(pr) is list and type(pl) is list:
            rewards += pr
            lengths += pl
            sizes.append((len(pr), len(pl)))
        else:
            return _profiled_by_group(results, starts)
    if not sizes:
        return [], np.zeros(0), np.zeros(0)
    try:  # numbers (bools among them) only: numpy would parse "1.5" or nest lists, which numeric refuses
        r, length = np.asarray(rewards), np.asarray(lengths)
    except (TypeError, ValueError, OverflowError):
        return _profiled_by_group(results, starts)
    if r.ndim != 1 or length.ndim != 1 or r.dtype.kind not in "biuf" or length.dtype.kind not in "biuf":
        return _profiled_by_group(results, starts)
    r, length = r.astype(np.float64), length.astype(np.float64)
    with np.errstate(invalid="ignore"):
        clean = (np.isfinite(r).all() and np.isfinite(length).all() and length.min(initial=0) >= 0
                 and np.abs(r).max(initial=0) < MAX_EXACT_INT and length.max(initial=0) < MAX_EXACT_INT)
    if not clean:
        return _profiled_by_group(results, starts)
    counts = np.array(sizes, dtype=np.int64).reshape(len(sizes), 2)
    kept = counts.min(axis=1)
    return kept.tolist(), r[_firsts(counts[:, 0], kept)], length[_firsts(counts[:, 1], kept)]


def _firsts(sizes: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """Indices of the first kept[g] values of each group g of a flat array of groups of sizes[g]."""
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    return np.arange(int(kept.sum())) + np.repeat(starts - np.concatenate(([0], np.cumsum(kept)[:-1])), kept)


def _profiled_by_group(results: list, starts: range) -> tuple[list[int], np.ndarray, np.ndarray]:
    pairs = [_profiled(results[s], s) for s in starts]
    return ([len(r) for r, _ in pairs], np.concatenate([r for r, _ in pairs]) if pairs else np.zeros(0),
            np.concatenate([length for _, length in pairs]) if pairs else np.zeros(0))


def group_metadata(results: list[dict[str, Any]], starts: range) -> dict[str, Any]:
    """Per-group metadata from each group's first row: profile bands and profiled rollouts.

    A band channel the row lists overrides the global band; an unlisted one falls back to it.
    """
    absent = (math.nan, math.nan, math.nan, 0.0)
    band_rows: dict[str, list] = {ch: [] for ch in CHANNELS}
    for s in starts:
        listed = _row_bands(results[s], s)
        for ch in CHANNELS:
            band_rows[ch].append(listed.get(ch, absent))
    sizes, p_rewards, p_lengths = _all_profiled(results, starts)
    G = len(starts)
    return {
        "profile_band": {ch: np.array(rows, dtype=np.float64).reshape(G, 4) for ch, rows in band_rows.items()},
        "profiled": {"offsets": np.cumsum([0, *sizes], dtype=np.int64), "reward": p_rewards, "length": p_lengths},
    }


def rollout_seconds(result: Mapping[str, Any], index: int = 0) -> float:
    """`openhands_run_time` clipped at 0; missing, None or non-numeric counts 0 (numeric strings parse)."""
    seconds = result["full_result"].get("openhands_run_time")
    try:
        value = max(float(seconds), 0.0)
    except OverflowError:  # an integer past float range: as infinite as NeMo-RL's float() can't say
        value = math.inf if seconds > 0 else 0.0
    except (TypeError, ValueError):
        return 0.0
    if not math.isfinite(value):
        # NeMo-RL would write a NaN or -inf reward here; refuse instead
        raise ValueError(f"results[{index}].full_result.openhands_run_time is {show(seconds)}; expected a finite number")
    return value


def has_run_time(result: Mapping[str, Any]) -> bool:
    """Whether `openhands_run_time` is there and reads as a number (else the row is charged 0)."""
    try:
        float(result["full_result"].get("openhands_run_time"))
    except OverflowError:
        return True
    except (TypeError, ValueError):
        return False
    return True




def rollout_calls(result: Mapping[str, Any]) -> int:
    """The number of `function_call` items in `full_result.response.output` (0 without a list)."""
    response = result["full_result"].get("response") or {}
    output = response.get("output") if type(response) is dict or isinstance(response, Mapping) else None
    if not isinstance(output, list):
        return 0
    calls = 0
    for item in output:  # a loop, not sum() over a generator: this runs for every row of every step
        if (type(item) is dict or isinstance(item, dict)) and item.get("type") == "function_call":
            calls += 1
    return calls
