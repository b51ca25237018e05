"""Deterministic synthetic conversations for mimo-v2-nano, rendered through the MiMo-V2.5 chat template.

Every sample is (messages, tools, enable_thinking) plus the assistant completion(s); the text the
model is trained on is exactly what the template renders for inference: prompt = template(history,
add_generation_prompt=True), completion = what the assistant writes, ending with <|im_end|>.
A two-turn tool conversation is packed into one sequence when the turn-1 prompt + completion is a
prefix of the turn-2 prompt (thinking on; with thinking off the template drops the prefilled
<think></think> from history, so the two turns become two sequences).

Tasks: arithmetic (+, - on 0..40, worked column by column: arith_working), counting, spelling,
facts from a generated table of fictional people, facts given in the prompt as notes, and tool use (get_weather, calculator, lookup_person,
send_message) with a tool response and a final answer that uses it.
Held-out: arithmetic pairs (a, b) whose hash falls in a tenth of the table (every units-digit
combination still occurs in training, with other tens: a held-out set defined by the units digits
would ask the model to invent addition facts it never saw), fact questions in phrasings never used
in training, and names / cities for in-context facts and tool calls from a disjoint, hash-defined
quarter of the syllable space. Training names and cities are drawn fresh from a space of thousands,
so the model must copy them from the prompt instead of memorising a short list.
"""
import json
import os
import random
import zlib
from typing import Dict, List, Optional, Tuple

import jinja2

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEMPLATE_CANDIDATES = [
    os.path.join(REPO, "..", "shared", "data", "chat_templates", "mimo-v2.5.jinja"),
    os.path.join(REPO, "models-src", "mimo-v2-nano", "chat_template.jinja"),
]


def load_template_text() -> str:
    for p in TEMPLATE_CANDIDATES:
        if os.path.exists(p):
            with open(p, encoding="utf-8") as f:
                return f.read()
    raise FileNotFoundError("mimo-v2.5.jinja chat template not found")


class Renderer:
    def __init__(self, template_text: Optional[str] = None):
        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        env.filters["tojson"] = lambda v, **kw: json.dumps(v, ensure_ascii=False)
        self.text = template_text or load_template_text()
        self.tmpl = env.from_string(self.text)

    def render(self, messages, tools=None, add_generation_prompt=True, enable_thinking=True) -> str:
        kw = dict(messages=messages, add_generation_prompt=add_generation_prompt,
                  enable_thinking=enable_thinking)
        if tools:
            kw["tools"] = tools
        return self.tmpl.render(**kw)


# ---------------------------------------------------------------------------------------------
# Vocabularies
SYL_A = ["ba", "ce", "da", "fi", "go", "ha", "ji", "ka", "lo", "ma", "ne", "pi", "ra", "so", "ta",
         "vi", "wu", "xo", "ye", "zu", "bri", "cla", "dro", "fen", "gal", "hol", "ith", "jor", "kel",
         "lin", "mor", "nal", "pel", "quin", "ros", "sel", "tam", "ul", "ven", "wil"]
SYL_B = ["na", "ra", "lo", "ne", "ta", "vik", "mar", "dor", "len", "sa", "ric", "ton", "wen", "bel",
         "mi", "ko", "ra", "lis", "den", "rah"]
CITY_END = ["ton", "burg", "vale", "port", "ford", "mere", "holm", "wick", "stead", "haven"]
JOBS = ["baker", "teacher", "pilot", "farmer", "doctor", "painter", "sailor", "builder", "singer",
        "gardener"]
CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "snowy", "foggy"]
WORDS = ["apple", "river", "house", "green", "table", "music", "light", "stone", "cloud", "bread",
         "chair", "water", "plant", "horse", "train", "dream", "smile", "ocean", "paper", "sugar",
         "tiger", "lemon", "glass", "clock", "happy", "cat", "dog", "sun", "tree", "book", "bird",
         "fish", "moon", "star", "rain", "road", "ship", "milk", "door", "hand", "garden", "window",
         "yellow", "purple", "orange", "silver", "castle", "forest", "rocket", "pencil"]
MESSAGES = ["see you at noon", "the meeting moved to Friday", "happy birthday", "call me back",
            "dinner is ready", "I will be late", "thanks for the help", "the door is open"]


def _cap(s: str) -> str:
    return s[0].upper() + s[1:]


def _make_names(rng: random.Random, n: int, parts: int, exclude=()) -> List[str]:
    out, seen = [], set(exclude)
    while len(out) < n:
        name = _cap("".join(rng.choice(SYL_A if i == 0 else SYL_B) for i in range(parts)))
        if name not in seen and 4 <= len(name) <= 9:
            seen.add(name)
            out.append(name)
    return out


def _make_cities(rng: random.Random, n: int, exclude=()) -> List[str]:
    out, seen = [], set(exclude)
    while len(out) < n:
        c = _cap(rng.choice(SYL_A) + rng.choice(CITY_END))
        if c not in seen:
            seen.add(c)
            out.append(c)
    return out


TOOLS = {
    "get_weather": {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city name."}}, "required": ["city"]}}},
    "calculator": {"type": "function", "function": {
        "name": "calculator", "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {
            "expression": {"type": "string", "description": "The expression, e.g. 2 * 3."}},
            "required": ["expression"]}}},
    "lookup_person": {"type": "function", "function": {
        "name": "lookup_person", "description": "Look up a person in the directory.",
        "parameters": {"type": "object", "properties": {
            "name": {"type": "string", "description": "The person's name."}},
            "required": ["name"]}}},
    "send_message": {"type": "function", "function": {
        "name": "send_message", "description": "Send a text message to a person.",
        "parameters": {"type": "object", "properties": {
            "to": {"type": "string", "description": "Who receives the message."},
            "text": {"type": "string", "description": "The message text."}},
            "required": ["to", "text"]}}},
}
TOOL_ORDER = ["get_weather", "calculator", "lookup_person", "send_message"]


def _hash(s: str) -> int:
    return zlib.crc32(s.encode("utf-8"))


def is_heldout_pair(a: int, b: int) -> bool:
    return _hash(f"{a}|{b}") % 10 == 3


def is_heldout_name(name: str) -> bool:
    """Names and cities of the evaluation set: a fixed quarter of the syllable space."""
    return _hash(name) % 4 == 1


class World:
    """The fact table from one seed; names and cities for prompts are drawn by the Generator."""

    def __init__(self, seed: int = 1234):
        rng = random.Random(seed)
        self.cities = _make_cities(rng, 14)
        self.people = _make_names(rng, 24, 2)
        self.table = {}
        for p in self.people:
            self.table[p] = {"city": rng.choice(self.cities), "age": rng.randint(20, 70),
                             "job": rng.choice(JOBS)}
        self.reserved = set(self.people) | set(self.cities)


# Phrasings: index < n_train are used in training, the rest only in evaluation.
FACT_Q = {
    "city": (["Where does {n} live?", "Which city is {n} from?", "Where is {n}'s home?",
              "Tell me the city of {n}.", "What city does {n} live in?"],
             ["In which city does {n} live?", "Tell me where {n} lives."],
             "{n} lives in {v}."),
    "age": (["How old is {n}?", "What is {n}'s age?", "What age is {n}?", "Tell me the age of {n}.",
             "How old is {n} now?"],
            ["Tell me how old {n} is.", "How many years old is {n}?"],
            "{n} is {v} years old."),
    "job": (["What does {n} do for work?", "What is {n}'s job?", "What is the job of {n}?",
             "Tell me the job of {n}.", "What is the work of {n}?"],
            ["Tell me {n}'s job.", "What work does {n} do?"],
            "{n} works as a {v}."),
}
ADD_Q = (["What is {a} + {b}?", "Compute {a} + {b}.", "What is {a} plus {b}?", "Add {a} and {b}."],
         ["Calculate {a} + {b}.", "{a} + {b} = ?"])
SUB_Q = (["What is {a} - {b}?", "Compute {a} - {b}.", "What is {a} minus {b}?",
          "Subtract {b} from {a}."],
         ["Calculate {a} - {b}.", "{a} - {b} = ?"])


class Sample:
    """One training/eval item: turns of (prompt_text, completion_text) plus metadata."""

    def __init__(self, kind, messages, tools, thinking, completion, meta=None):
        self.kind, self.messages, self.tools = kind, messages, tools
        self.thinking, self.completion, self.meta = thinking, completion, meta or {}


def tool_call_text(name: str, args: Dict[str, str]) -> str:
    """The tool-call block exactly as the chat template renders it in history."""
    s = "<tool_call>\n<function=" + name + ">\n"
    for k, v in args.items():
        s += "<parameter=" + k + ">" + str(v) + "</parameter>\n"
    return s + "</function>\n</tool_call>"


def arith_working(a: int, op: str, b: int) -> str:
    """Column arithmetic written out, one digit fact per clause, so that a sum the model never saw
    is made of steps it saw thousands of times: the problem restated (operands in a fixed order),
    the ones column (with its carry or borrow), the tens column.
      19 + 22. Ones: 9 + 2 = 11, write 1, carry 1. Tens: 1 + 2 + 1 = 4.
      37 - 18. Ones: 17 - 8 = 9, borrow 1. Tens: 3 - 1 - 1 = 1."""
    a1, a0, b1, b0 = a // 10, a % 10, b // 10, b % 10
    if op == "+":
        s0 = a0 + b0
        carry = s0 // 10
        return (f"{a} + {b}. Ones: {a0} + {b0} = {s0}, write {s0 % 10}, carry {carry}. "
                f"Tens: {a1} + {b1} + {carry} = {a1 + b1 + carry}.")
    borrow = 1 if a0 < b0 else 0
    top = a0 + 10 * borrow
    return (f"{a} - {b}. Ones: {top} - {b0} = {top - b0}, borrow {borrow}. "
            f"Tens: {a1} - {b1} - {borrow} = {a1 - b1 - borrow}.")


class Generator:
    def __init__(self, seed: int, world: World, heldout: bool = False):
        self.rng = random.Random(seed)
        self.w = world
        self.heldout = heldout

    # each task returns a list of Samples (one per assistant turn)
    def arith(self, thinking):
        r = self.rng
        op = r.choice("+-")
        while True:
            a, b = r.randint(0, 40), r.randint(0, 40)
            if op == "-" and b > a:
                a, b = b, a
            if is_heldout_pair(a, b) == self.heldout:
                break
        c = a + b if op == "+" else a - b
        qs = (ADD_Q if op == "+" else SUB_Q)[1 if self.heldout and r.random() < 0.5 else 0]
        q = r.choice(qs).format(a=a, b=b)
        work = arith_working(a, op, b)
        if thinking:
            text = f"<think>{work}</think>{a} {op} {b} = {c}."
        else:
            text = f"{work} So {a} {op} {b} = {c}."
        return [Sample("arith", [{"role": "user", "content": q}], None, thinking, text,
                       {"answer": str(c), "a": a, "b": b, "op": op})]

    def fact(self, thinking):
        r = self.rng
        n = r.choice(self.w.people)
        attr = r.choice(list(FACT_Q))
        train_q, held_q, ans_t = FACT_Q[attr]
        q = r.choice(held_q if self.heldout else train_q).format(n=n)
        v = self.w.table[n][attr]
        think = f"<think>I know {n}.</think>" if thinking else ""
        return [Sample("fact", [{"role": "user", "content": q}], None, thinking,
                       think + ans_t.format(n=n, v=v), {"answer": str(v)})]

    def _fresh(self, make, k):
        """k distinct names from make(rng), on this generator's side of the held-out split."""
        out = []
        while len(out) < k:
            x = make(self.rng)
            if x not in self.w.reserved and x not in out and is_heldout_name(x) == self.heldout:
                out.append(x)
        return out

    def _names(self, k=1):
        def make(r):
            while True:
                n = _cap("".join(r.choice(SYL_A if i == 0 else SYL_B) for i in range(r.choice([2, 2, 3]))))
                if 4 <= len(n) <= 9:
                    return n
        return self._fresh(make, k)

    def _cities(self, k=1):
        def make(r):
            stem = r.choice(SYL_A) + (r.choice(SYL_B) if r.random() < 0.5 else "")
            return _cap(stem + r.choice(CITY_END))
        return self._fresh(make, k)

    def context_fact(self, thinking):
        """Facts given in the prompt as notes; the question names the notes, so it cannot be taken
        for a question about the fact table (which the model answers from memory)."""
        r = self.rng
        k = r.randint(2, 4)
        names = self._names(k)
        cities = self._cities(k)
        ctx = "Notes: " + " ".join(f"{n} lives in {c}." for n, c in zip(names, cities))
        i = r.randrange(k)
        q = ctx + " " + r.choice(["Using the notes, where does {n} live?",
                                  "According to the notes, which city is {n} in?"]).format(n=names[i])
        think = f"<think>The notes say {names[i]} lives in {cities[i]}.</think>" if thinking else ""
        return [Sample("context", [{"role": "user", "content": q}], None, thinking,
                       think + f"{names[i]} lives in {cities[i]}.", {"answer": cities[i]})]

    def count(self, thinking):
        r = self.rng
        a = r.randint(0, 90)
        b = a + r.randint(2, 7)
        q = r.choice(["Count from {a} to {b}.", "List the numbers from {a} to {b}."]).format(a=a, b=b)
        think = f"<think>Start at {a} and stop at {b}.</think>" if thinking else ""
        return [Sample("count", [{"role": "user", "content": q}], None, thinking,
                       think + ", ".join(str(x) for x in range(a, b + 1)) + ".",
                       {"answer": ", ".join(str(x) for x in range(a, b + 1))})]

    def spell(self, thinking):
        r = self.rng
        w = r.choice(WORDS)
        if r.random() < 0.5:
            q = r.choice(["Spell the word {w}.", "How do you spell {w}?"]).format(w=w)
            ans = f"{w} is spelled " + "-".join(w) + "."
            think = f"<think>I write each letter of {w}.</think>" if thinking else ""
        else:
            q = r.choice(["How many letters are in the word {w}?", "Count the letters in {w}."]).format(w=w)
            ans = f"The word {w} has {len(w)} letters."
            think = f"<think>{w} is spelled " + "-".join(w) + ".</think>" if thinking else ""
        return [Sample("spell", [{"role": "user", "content": q}], None, thinking, think + ans)]

    def tool(self, thinking):
        r = self.rng
        name = r.choice(TOOL_ORDER)
        others = [t for t in TOOL_ORDER if t != name]
        chosen = set([name] + r.sample(others, r.randint(0, 2)))
        tools = [TOOLS[t] for t in TOOL_ORDER if t in chosen]
        if name == "get_weather":
            (city,) = self._cities()
            q = r.choice(["What is the weather in {c}?", "How is the weather in {c} today?",
                          "Is it warm in {c}?"]).format(c=city)
            args = {"city": city}
            t, cond = r.randint(-5, 35), r.choice(CONDITIONS)
            resp = {"city": city, "temperature": t, "condition": cond}
            plan = f"The user asks about the weather in {city}. I will call get_weather."
            final = f"In {city} it is {t} degrees and {cond}."
            after = f"The tool says {t} degrees and {cond}."
            facts = [str(t), cond]
        elif name == "calculator":
            a, b = r.randint(10, 999), r.randint(2, 99)
            op = r.choice(["*", "+", "-"])
            expr = f"{a} {op} {b}"
            q = r.choice(["Use the calculator to compute {e}.", "What is {e}? Use the calculator.",
                          "Please calculate {e} with the calculator tool."]).format(e=expr)
            args = {"expression": expr}
            val = a * b if op == "*" else (a + b if op == "+" else a - b)
            resp = {"result": val}
            plan = f"I will call calculator with {expr}."
            final = f"{expr} = {val}."
            after = f"The result is {val}."
            facts = [str(val)]
        elif name == "lookup_person":
            (n,) = self._names()
            q = r.choice(["Look up {n} and tell me where they live.", "Where does {n} live? Check the directory.",
                          "Find {n} in the directory."]).format(n=n)
            args = {"name": n}
            (city,), age = self._cities(), r.randint(18, 90)
            resp = {"name": n, "city": city, "age": age}
            plan = f"I will call lookup_person for {n}."
            final = f"{n} lives in {city} and is {age} years old."
            after = f"{n} lives in {city}."
            facts = [city, str(age)]
        else:
            (n,) = self._names()
            text = r.choice(MESSAGES)
            q = r.choice(["Send a message to {n} saying {t}.", "Tell {n}: {t}.",
                          "Message {n} that {t}."]).format(n=n, t=text)
            args = {"to": n, "text": text}
            resp = {"status": "sent", "to": n}
            plan = f"I will call send_message to {n}."
            final = f"Done. I sent your message to {n}."
            after = "The message was sent."
            facts = [n]
        msgs = [{"role": "user", "content": q}]
        call = tool_call_text(name, args)
        c1 = (f"<think>{plan}</think>" if thinking else "") + call
        s1 = Sample("tool_call", list(msgs), tools, thinking, c1, {"name": name, "args": args})
        amsg = {"role": "assistant", "content": "",
                "tool_calls": [{"type": "function", "function": {"name": name, "arguments": args}}]}
        if thinking:
            amsg["reasoning_content"] = plan
        msgs2 = msgs + [amsg, {"role": "tool", "content": json.dumps(resp)}]
        c2 = (f"<think>{after}</think>" if thinking else "") + final
        s2 = Sample("tool_answer", msgs2, tools, thinking, c2, {"facts": facts})
        return [s1, s2]

    def tool_direct(self, thinking):
        """Tools offered but not needed: answer from the fact table."""
        (s,) = self.fact(thinking)
        chosen = self.rng.sample(TOOL_ORDER, self.rng.randint(1, 3))
        s.tools = [TOOLS[t] for t in TOOL_ORDER if t in chosen and t != "lookup_person"] or [TOOLS["calculator"]]
        s.kind = "fact_tools"
        return [s]

    MIX = [("arith", 0.30), ("fact", 0.12), ("context_fact", 0.17), ("count", 0.03), ("spell", 0.04),
           ("tool", 0.30), ("tool_direct", 0.04)]

    def conversation(self) -> List[Sample]:
        x = self.rng.random()
        thinking = self.rng.random() < 0.5
        acc = 0.0
        for name, p in self.MIX:
            acc += p
            if x < acc:
                return getattr(self, name)(thinking)
        return self.arith(thinking)


# Pass-key retrieval (Mohtashami & Jaggi's format), exactly as `mimo bench niah` asks it
# (tools/cli/bench_niah.cc): a task line, filler sentences, the needle after the sentence nearest
# to the depth, and the question at the end. The answer has to come from the needle, which only
# the full-attention layers can see once it is more than a window behind.
PASSKEY_FILLER = ("The grass is green. The sky is blue. The sun is yellow. Here we go. "
                  "There and back again. ")
PASSKEY_TASK = ("There is an important piece of information hidden inside a lot of irrelevant text. "
                "Find it and memorize it. I will quiz you about it.\n\n")
PASSKEY_QUESTION = "\n\nWhat is the pass key? The pass key is"


def passkey_prompt(chars: int, depth: float, key: str) -> str:
    """The haystack of `chars` filler characters with the needle after the sentence nearest to
    depth * chars (0: first, 1: last), as bench_niah.cc's Haystack() builds it."""
    needle = f"The pass key is {key}. Remember it. {key} is the pass key. "
    filler = (PASSKEY_FILLER * (chars // len(PASSKEY_FILLER) + 1))[:chars]
    at = int(depth * chars)
    if at >= chars:
        at = chars
    else:
        dot = filler.rfind(". ", 0, at + 2)
        at = 0 if dot < 0 else dot + 2
    return PASSKEY_TASK + filler[:at] + needle + filler[at:] + PASSKEY_QUESTION


PASSKEY_TOKENS_PER_CHAR = 0.267  # the filler's tokens per character (Qwen3 tokenizer)
PASSKEY_OVERHEAD = 75            # tokens of the prompt around an empty haystack and of the answer


def passkey_chars(tokens: int) -> int:
    """Filler characters for a prompt + answer of about `tokens` tokens."""
    return max(0, int((tokens - PASSKEY_OVERHEAD) / PASSKEY_TOKENS_PER_CHAR))


def passkey_sample(rng: random.Random, chars: int, thinking: bool, depth: Optional[float] = None) -> Sample:
    """One pass-key conversation: a random 5-digit key at a uniform depth of `chars` filler
    characters. The answer is short enough that the key is inside bench niah's 16 tokens with
    thinking on too (the reasoning is not part of the content it scores)."""
    key = str(rng.randint(10000, 99999))
    depth = rng.random() if depth is None else depth
    think = "<think>I know it.</think>" if thinking else ""
    return Sample("passkey", [{"role": "user", "content": passkey_prompt(chars, depth, key)}], None,
                  thinking, think + f"The pass key is {key}.", {"answer": key, "depth": depth})


def prompt_text(r: Renderer, s: Sample) -> str:
    return r.render(s.messages, s.tools, add_generation_prompt=True, enable_thinking=s.thinking)


def encode_conversation(tok, r: Renderer, samples: List[Sample]) -> List[Tuple[List[int], List[int]]]:
    """Token sequences with loss masks (1 = assistant-written token, incl. <|im_end|>).
    Consecutive turns share one sequence when the earlier turn is a prefix of the later prompt."""
    seqs = []
    cur_text, cur_ids, cur_mask = None, None, None
    for s in samples:
        p = prompt_text(r, s)
        if cur_text is not None and p.startswith(cur_text):
            extra = p[len(cur_text):]
            ids = tok.encode(extra)
            cur_ids += ids
            cur_mask += [0] * len(ids)
        else:
            if cur_ids is not None:
                seqs.append((cur_ids, cur_mask))
            ids = tok.encode(p)
            cur_ids, cur_mask = list(ids), [0] * len(ids)
        cids = tok.encode(s.completion + "<|im_end|>")
        cur_ids += cids
        cur_mask += [1] * len(cids)
        cur_text = p + s.completion + "<|im_end|>"
    if cur_ids is not None:
        seqs.append((cur_ids, cur_mask))
    return seqs


def eval_set(world: World, seed: int = 777, n_per_kind: int = 40, accept=None) -> List[Sample]:
    """Held-out prompts: arithmetic pairs, fact phrasings, names and cities never used in training.
    accept(sample) -> bool can reject items (e.g. names whose tokens the model never saw); the
    generator then draws more until each kind has n_per_kind items (or 20x as many tries)."""
    g = Generator(seed, world, heldout=True)
    out = []
    for kind in ["arith", "fact", "context_fact", "tool"]:
        count = tries = 0
        while count < n_per_kind and tries < 20 * n_per_kind:
            tries += 1
            samples = getattr(g, kind)(count % 2 == 0)
            if accept is None or all(accept(x) for x in samples):
                out.extend(samples)
                count += 1
    return out
