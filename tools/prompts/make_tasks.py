#!/usr/bin/env python3
"""Request files for `tierkv bench` (and `check`, `compare`): JSON Lines in
the schema of docs/workloads.md, built from ../shared/data (never copied
into the repository).

  fewshot  few-shot tasks, the papers' setup: each prefix is 2-10 (--shots)
           answered examples of a task, shared by several questions (how
           many: drawn from a normal distribution, --reuse-mean/--reuse-sd);
           a question carries its choices, scored by log-likelihood.
           --task piqa (labelled: PIQA's validation labels), copa or
           openbookqa (the shared lm-eval requests; no gold labels: accuracy
           is agreement with recompute), or mixed. --min-prefix-chars adds
           examples until a prefix is that long (about 3.4 characters make
           a token of the default model: 8000 gives ~2,300-token prefixes)
  docqa    LMCache's long-document QA shape: --documents windows of a corpus
           text, each asked --questions questions in --order random, tiled
           (a document's questions together) or interleaved (round robin);
           a question quotes a sentence of the document and offers two
           continuations, the one that follows it there (the label) and one
           from elsewhere in the document
  chat     multi-round chat: --users conversations of --rounds turns (the
           ShareGPT-schema file's human and gpt turns) after a shared system
           prompt of --system-chars; each turn's prefix is the conversation
           so far, its query the next human turn
  ruler    RULER's synthetic long-context tasks (Hsieh et al. 2024, "RULER:
           What's the real context size of your long-context language
           models?"), --tasks (default all): niah_single, niah_uuid,
           niah_multikey, niah_multivalue, niah_multiquery (needles in a
           haystack of --haystack wikitext2|austen sentences), vt (variable
           tracking), cwe and fwe (common and frequent words extraction), at
           --lengths tokens (default 1024,2048,4096,8192: prompts of 0.6-0.95
           x length, estimated at --chars-per-token 3.9) and --depths (default
           11: 0, 0.1 ... 1). A haystack is a document shared by its
           questions: one per depth (niah_single and niah_uuid: --needles
           needles to a haystack, default 1, as RULER's), one per chain (vt),
           or one (cwe, fwe). A question carries `answers`, scored by the
           share of them in a greedy answer of `max_tokens` tokens, and is
           wrapped in --template chatml|gemma|plain. --size quick (CI's:
           niah_single, niah_multikey and vt at 1024, 5 depths) or accuracy
           (every task at 1024-8192, 11 depths, cwe and fwe 2 haystacks)
           presets them; explicit flags win. Writes --out FILE (default
           stdout); counts per task and length on stderr

  suite    the workloads of `tierkv bench --suite`: fewshot.jsonl, docqa.jsonl
           and chat.jsonl in --out, at --size quick (CI's: prefixes of
           ~400-600 tokens, a few requests each) or paper (prefixes of
           2,000-2,600 tokens, the papers' scale for this model)

  python3 tools/prompts/make_tasks.py fewshot --task piqa --requests 40 > piqa.jsonl
  python3 tools/prompts/make_tasks.py suite --size quick --out build/workloads/quick
  python3 tools/prompts/make_tasks.py ruler --size accuracy --out ruler.jsonl
"""
import argparse
import json
import math
import os
import random
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared"))


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except ValueError as e:
                    sys.exit(f"{path}:{n}: not JSON ({e})")


def piqa(shared):
    """(examples, questions): an example is answered text; a question is
    (query, choices, label)."""
    d = os.path.join(shared, "data", "piqa")
    items = list(read_jsonl(os.path.join(d, "valid.jsonl")))
    with open(os.path.join(d, "valid-labels.lst")) as f:
        labels = [int(x) for x in f.read().split()]
    if len(labels) != len(items):
        sys.exit(f"{d}: {len(items)} items but {len(labels)} labels")
    examples, questions = [], []
    for i, (it, lab) in enumerate(zip(items, labels)):
        sols = [it["sol1"].strip(), it["sol2"].strip()]
        if not it["goal"].strip() or not all(sols):
            continue
        if i % 2 == 0:  # half the items are examples, half questions: none is both
            examples.append(f"Question: {it['goal'].strip()}\nAnswer: {sols[lab]}")
        else:
            questions.append((f"Question: {it['goal'].strip()}\nAnswer:", [" " + s for s in sols], lab))
    return examples, questions


def lm_eval_task(shared, name):
    """COPA or OpenBookQA from the lm-eval requests: consecutive lines that
    share their examples and differ in the ending are one question."""
    path = os.path.join(shared, "data", "fewshot", name)
    examples, questions, group = set(), [], []

    def flush():
        if len(group) < 2:
            return
        ends = [g[1] for g in group]
        stem = os.path.commonprefix(ends)
        stem = stem[: stem.rfind(" ") + 1] if " " in stem else ""
        choices = [e[len(stem):] for e in ends]
        if stem.strip() and all(c.strip() for c in choices) and len(set(choices)) == len(choices):
            questions.append((stem.rstrip(), [" " + c.strip() for c in choices], -1))

    for j in read_jsonl(path):
        parts = [p for p in j.get("prompt", "").split("\n\n") if p.strip()]
        if len(parts) < 2:
            continue
        examples.update(parts[:-1])
        shots = "\n\n".join(parts[:-1])
        if group and group[0][0] != shots:
            flush()
            group = []
        group.append((shots, parts[-1]))
    flush()
    return sorted(examples), questions


def fewshot(a, rng):
    tasks = ["piqa", "copa", "openbookqa"] if a.task == "mixed" else [a.task]
    data = {}
    for t in tasks:
        data[t] = piqa(a.shared) if t == "piqa" else lm_eval_task(a.shared, t + "-5.jsonl")
        if not data[t][0] or not data[t][1]:
            sys.exit(f"task {t}: no examples or questions found")
    qnext = {t: 0 for t in tasks}
    out, p, n = [], 0, 0
    while n < a.requests:
        t = tasks[p % len(tasks)]
        examples, questions = data[t]
        shots = rng.sample(examples, min(len(examples), rng.randint(a.shots_min, a.shots_max)))
        while sum(len(s) + 2 for s in shots) < a.min_prefix_chars and len(shots) < len(examples):
            shots.append(rng.choice(examples))
        doc = f"{t}-prefix-{p}"
        out.append({"document": doc, "text": "\n\n".join(shots) + "\n\n"})
        reuse = max(1, round(rng.gauss(a.reuse_mean, a.reuse_sd)))
        for _ in range(min(reuse, a.requests - n)):
            n += 1
            q, choices, label = questions[qnext[t] % len(questions)]
            qnext[t] += 1
            r = {"id": f"{t}-{qnext[t]}", "task": t, "prefix_doc": doc, "query": q, "choices": choices}
            if label >= 0:
                r["label"] = label
            out.append(r)
        p += 1
    docs = [r for r in out if "document" in r]
    reqs = [r for r in out if "query" in r]
    rng.shuffle(reqs)  # prefixes recur at random, as users' requests do
    return docs + reqs


def sentences(text):
    s = [x.strip().replace("\n", " ") for x in re.split(r"(?<=[.!?])\s+", text)]
    return [x for x in s if 30 <= len(x) <= 200]


def docqa(a, rng):
    with open(os.path.join(a.shared, "data", "corpus", "austen.txt"), encoding="utf-8") as f:
        text = f.read()
    out, asked = [], []
    step = len(text) // (a.documents + 1)
    for d in range(a.documents):
        start = text.find("\n\n", (d + 1) * step - a.doc_chars // 2) + 2
        body = text[start:start + a.doc_chars]
        sent = sentences(body)
        if len(sent) < 4:
            sys.exit(f"document {d}: too few sentences; raise --doc-chars")
        doc = f"doc-{d}"
        out.append({"document": doc, "text": body})
        qs = []
        for k in range(a.questions):
            i = rng.randrange(len(sent) - 1)
            wrong = rng.choice([s for j, s in enumerate(sent) if j not in (i, i + 1)])
            choices = [" " + sent[i + 1], " " + wrong]
            label = rng.randrange(2)
            if label == 1:
                choices.reverse()
            qs.append({"id": f"{doc}-q{k}", "task": "docqa", "prefix_doc": doc,
                       "query": f"\n\nIn the text above, the sentence \"{sent[i]}\" is followed by:",
                       "choices": choices, "label": label})
        asked.append(qs)
    if a.order == "tiled":
        reqs = [q for qs in asked for q in qs]
    elif a.order == "interleaved":
        reqs = [qs[k] for k in range(a.questions) for qs in asked]
    else:
        reqs = [q for qs in asked for q in qs]
        rng.shuffle(reqs)
    return out + reqs


def chat(a, rng):
    with open(os.path.join(a.shared, "data", "sharegpt", "dummy_conversation.json"), encoding="utf-8") as f:
        convs = json.load(f)
    with open(os.path.join(a.shared, "data", "corpus", "jargon.txt"), encoding="utf-8") as f:
        jargon = f.read()
    start = jargon.find("\n\n", len(jargon) // 3) + 2
    system = "You answer questions about this text.\n\n" + jargon[start:start + a.system_chars]
    pairs = []
    for c in convs:
        msgs = c.get("conversations", [])
        for h, g in zip(msgs[::2], msgs[1::2]):
            if h.get("from") == "human" and g.get("from") == "gpt" and h["value"].strip() and g["value"].strip():
                pairs.append((h["value"].strip()[:400], g["value"].strip()[:600]))
    if not pairs:
        sys.exit("no human/gpt turns in the ShareGPT file")
    out = [{"document": "system", "text": system}]
    for u in range(a.users):
        history = ""
        for t in range(a.rounds):
            h, g = pairs[(u * a.rounds + t) % len(pairs)]
            r = {"id": f"user{u}-turn{t}", "task": "chat", "query": f"\nUser: {h}\nAssistant:"}
            if history:
                r["prefix"] = system + history
            else:
                r["prefix_doc"] = "system"
            out.append(r)
            history += f"\nUser: {h}\nAssistant: {g}\n"
    return out


# RULER (Hsieh et al. 2024, "RULER: What's the real context size of your
# long-context language models?"): synthetic tasks at a chosen length, each
# answer a few strings that a right greedy answer contains.
RULER_TASKS = ["niah_single", "niah_uuid", "niah_multikey", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe"]
# Tokens generated greedily per task: a 7-digit number is 7 tokens of
# SmolLM2, a UUID 35; SmolLM2 lists several values as the needles'
# sentences, ~20 tokens each (48 tokens cut multivalue's answers to two).
RULER_MAX_TOKENS = {"niah_single": 16, "niah_uuid": 48, "niah_multikey": 16, "niah_multivalue": 96,
                    "niah_multiquery": 96, "vt": 64, "cwe": 96, "fwe": 96}
# --size presets; flags given explicitly override them. cwe and fwe ask one
# question per haystack, so they get aggregate_haystacks.
RULER_DEFAULTS = {"tasks": ",".join(RULER_TASKS), "lengths": "1024,2048,4096,8192", "depths": 11, "haystacks": 1}
RULER_SIZES = {
    "quick": {"tasks": "niah_single,niah_multikey,vt", "lengths": "1024", "depths": 5, "haystacks": 1},
    "accuracy": {"tasks": ",".join(RULER_TASKS), "lengths": "1024,2048,4096,8192", "depths": 11, "haystacks": 1,
                 "aggregate_haystacks": 2},
}
# (opening, closing): prefix = opening + instruction + haystack, query =
# question + closing + answer prefix.
TEMPLATES = {
    "chatml": ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
               "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"),
    "gemma": ("<start_of_turn>user\n", "<end_of_turn>\n<start_of_turn>model\n"),
    "plain": ("", "\n"),
}
HAYSTACKS = {"wikitext2": ("wikitext2", "test.txt"), "austen": ("corpus", "austen.txt")}

# Keys of the needles: distinct common words.
KEY_WORDS = """apple river garden window candle mountain pencil basket ocean forest bridge castle meadow
lantern violin tiger rabbit falcon dolphin orange lemon cherry pepper carrot onion butter cookie honey
blanket pillow mirror ladder hammer needle anchor compass saddle helmet jacket ribbon button marble
crystal diamond silver copper bronze harbor island desert valley canyon glacier volcano thunder rainbow
sunset shadow feather pebble puzzle rocket planet comet galaxy engine wagon tractor bicycle canoe
kettle teapot spoon kitchen chimney cottage palace temple tower market library museum theater
village station airport office doctor farmer sailor painter poet captain wizard giant dragon unicorn
parrot penguin squirrel turtle beaver monkey zebra camel spider beetle hornet walnut almond peanut
tomato potato cabbage melon banana mango""".split()

# cwe's words: common English words, none inside another (a word inside an
# answer would be counted as found) nor inside the task's own wording.
CWE_WORDS = """ability absence academy accident account acid actor address admiral advice affair agency
airline alarm album alley amount angle animal ankle answer apology appetite april arch argument
army arrow artist aspect attic auction august author autumn avenue award badge bakery balcony
bamboo bandage banner barrel basin battery beach beard beauty bedroom belief bell belt bench
berry biscuit blade bloom board body bonus border bottle boulder bowl bracket brain branch brass
bread breeze brick brother bubble bucket budget buffalo bullet bundle burden bush cabin cable
cactus cake camera campus canal candy cannon canvas carpet cart cattle cave ceiling cellar cement
century cereal chain chalk champion channel chapter charity cheese chess chicken child chorus
circle circus citizen clay clerk cliff climate clock closet cloth clown coach coast cobweb coffee
coin collar colony column comfort comment concert copy coral cotton couch country courage cousin
cradle crane crayon cream creek crew cricket crowd crown cube cupboard curtain cushion custom
daisy dancer danger daughter dawn debate decade deer degree dentist deputy detail device diary
dinner dish doll donkey doorway dough dozen drawer dream dress drum duck dust eagle echo edge
effort elbow election elephant elevator emerald empire energy envelope error estate evening
event exam factory fairy family fashion father fault fence ferry fiber field finger fire fish
flag flame flavor fleet flight flood floor flower flute fog folder forehead fork fossil fountain
fox frame freedom friend frog frost fruit fuel funnel fur furnace gadget gallery game gap gate
gear gem ghost gift ginger giraffe glass glove glue goat gold goose gossip grain grape grass
gravel gravity grocery guest guitar gulf habit hair hall harvest hat hawk health heart heat
hedge height hero highway hill history hobby holiday horizon horse hospital hotel hunger hut
ice idea image inch income index industry infant ink insect iron ivory jar jaw jelly jewel
journey judge juice jungle jury kayak key kidney king kitten knee knife knot label lake lamb
lamp language laptop laundry lawn lawyer layer leaf leather lecture legend lesson letter lever
lily limb linen lion liquid lizard lobby lobster locket lodge loft lumber lunch lung machine
magnet mail mammal manager mango maple marsh mask meadow meal medal melody member menu message
metal method midnight milk mineral minute mission mist model moment money month moon morning
mosquito moss mother motor mouse mouth mud muscle mushroom music mustard nail napkin nation
nature neck nephew nest network newspaper nickel niece night noodle noise north notebook novel
number nurse nut oak oath object oven owl oxygen oyster package paddle page paint pajamas panda
panel paper parade parcel parent parrot party passage pasta path patrol pattern peach pearl pebble
pelican penny people piano picnic picture pigeon pilot pine pipe pirate pistol pizza plane plant
plate pocket poem police pond pony porch portrait powder prairie prince prison prize profit
pudding pump pumpkin puppet purse quarter queen quilt rabbit radio rail rain ranch razor receipt
recipe record reef region rhythm rice riddle ring robot rock roof root rope rose rubber rug ruler
saddle safety sail salad salmon salt sample sand satellite sauce sausage scale scarf school
science scissors screen sculpture season seed shadow shark sheep shelf shell shirt shoe shop
shovel shrimp silk singer sister skate skirt skull sky slope snail snake snow soap soccer sock
soda sofa soil soldier song soup spark sphere spice spider spinach sponge spring square squirrel
stable stadium stamp steam steel stem stone storm story stove straw stream street string student
sugar suit summer sunrise supper surface swamp sweater swing symbol syrup tablet tail tailor
teacher temple tent thread throat thumb ticket tiger timber toast tobacco toilet tomato tongue
tool tooth torch tourist towel toy track trader traffic trail train treasure tree triangle
trophy truck trumpet tunnel turkey twig umbrella uncle uniform universe vacuum valley vase
velvet vessel victory video village vinegar violin visitor voice volcano volume voyage waiter
wallet walnut war wardrobe warrior wax weapon weather wedding week whale wheat wheel whistle
widow wife window wine winter wire witch wolf woman wool yard yacht yogurt zebra zipper zoo""".split()

CWE_PROMPT = ("Below is a numbered list of words. In these words, some appear more often than others. "
              "Memorize the ones that appear most often.",
              "Question: What are the 10 most common words in the above list?",
              "Answer: The top 10 words that appear most often in the list are:")
FWE_PROMPT = ("Read the following coded text and track the frequency of each coded word. "
              "Find the three most frequently appeared coded words.",
              "Question: Do not provide any explanation. Please ignore the dots '....'. "
              "What are the three most frequently appeared words in the above coded text?",
              "Answer: According to the coded text above, the three most frequently appeared words are:")
VT_PROMPT = ("Memorize and track the chain(s) of variable assignment hidden in the following text.",
             "Question: Find all variables that are assigned the value {v} in the text above.",
             "Answer: According to the chain(s) of variable assignment in the text above, "
             "5 variables are assigned the value {v}, they are:")


def cwe_words():
    wording = " ".join(CWE_PROMPT).lower()
    words = sorted(set(CWE_WORDS))
    return [w for w in words if w not in wording and not any(w != v and w in v for v in words)]


UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def est_tokens(s, cpt, letters=1.0):
    """The model's tokens for s, estimated without its tokenizer: each digit,
    each character of a UUID and each non-ASCII character is a token
    (SmolLM2 splits numbers into digits), other characters cost 1/cpt (a
    letter letters/cpt: more for lists and coded words than for prose). A
    corpus region of tables or foreign names would overflow a plain
    characters-per-token estimate."""
    u = UUID.sub("", s)
    one = sum(c.isdigit() or not c.isascii() for c in u)
    alpha = sum(c.isascii() and c.isalpha() for c in u)
    return len(s) - len(u) + one + (alpha * letters + len(u) - one - alpha) / cpt


_corpus = {}


def corpus_sentences(path):
    """The corpus as a list of sentences: wikitext's heading lines dropped,
    `<unk>` written `unk` (a special token of some tokenizers), whitespace
    collapsed, fragments without a sentence end (chapter titles) dropped."""
    if path not in _corpus:
        if not os.path.isfile(path):
            sys.exit(f"{path}: not found (--haystack names it; --shared DIR names the shared folder)")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        sents = []
        for p in re.split(r"\n\s*\n|\n(?= = )", text):
            p = " ".join(p.replace("<unk>", "unk").split())
            if not p or re.fullmatch(r"=.*=", p):
                continue
            for s in re.split(r"(?<=[.!?])\s+|(?<=[.!?][\"'])\s+", p):
                if len(s.split()) >= 3 and re.search(r"[.!?][\"']?$", s):
                    sents.append(s)
        if len(sents) < 100:
            sys.exit(f"{path}: only {len(sents)} sentences")
        _corpus[path] = sents
    return _corpus[path]


def budget_tokens(a, length, task):
    """The estimated tokens a whole prompt may have: 0.93 of the length (an
    estimate's margin), and room for the answer."""
    return min(0.93 * length, length - RULER_MAX_TOKENS[task])


def fill_haystack(a, rng, used, budget):
    """Consecutive corpus sentences from a seeded start (a new one per
    haystack) while their estimated tokens stay within budget."""
    sents = corpus_sentences(a.haystack_path)
    start = rng.randrange(len(sents))
    while start in used:
        start = rng.randrange(len(sents))
    used.add(start)
    out, cost = [], 0.0
    while len(out) < len(sents):
        s = sents[(start + len(out)) % len(sents)]
        c = est_tokens(s + " ", a.chars_per_token)
        if cost + c > budget:
            break
        out.append(s)
        cost += c
    return out


def place(hay, inserts):
    """hay with each (sentence index, text) of inserts before that sentence
    (index len(hay): at the end); inserts at one index keep their order."""
    at = {}
    for i, t in inserts:
        at.setdefault(i, []).append(t)
    out = []
    for i in range(len(hay) + 1):
        out += at.get(i, [])
        if i < len(hay):
            out.append(hay[i])
    return " ".join(out)


def magic_uuid(rng):
    return "%08x-%04x-%04x-%04x-%012x" % tuple(rng.getrandbits(b) for b in (32, 16, 16, 16, 48))


def distinct(rng, n, draw):
    out = []
    while len(out) < n:
        x = draw(rng)
        if x not in out:
            out.append(x)
    return out


def niah(a, rng, task, length, used):
    """The haystacks of one set: [(id suffix, text, questions, needle keys)];
    a question is (index, query, answers, depth)."""
    kind = "uuid" if task == "niah_uuid" else "number"
    if task == "niah_multikey":
        keys = distinct(rng, a.depths, magic_uuid)
    else:
        keys = rng.sample(KEY_WORDS, 3 if task == "niah_multivalue" else a.depths)
    value = magic_uuid if kind == "uuid" else (lambda r: str(r.randint(1000000, 9999999)))
    if task == "niah_multivalue":
        vals = distinct(rng, 4 * len(keys), value)
        needles = [(keys[k // 4], vals[k], None) for k in range(len(vals))]
    else:
        vals = distinct(rng, len(keys), value)
        depths = [round(i / (a.depths - 1), 4) for i in range(a.depths)]
        needles = [(k, v, d) for k, v, d in zip(keys, vals, depths)]
    # The questions: a key each, or three keys at once (multiquery).
    if task == "niah_multiquery":
        order = rng.sample(keys, len(keys))
        groups = [order[i:i + 3] for i in range(0, len(order), 3)]
        spare = [k for k in order if k not in groups[-1]]
        groups[-1] += rng.sample(spare, min(len(spare), 3 - len(groups[-1])))
    else:
        groups = [[k] for k in keys]
    _, close = TEMPLATES[a.template]
    questions = []
    for i, g in enumerate(groups):
        names = g[0] if len(g) == 1 else ", ".join(g[:-1]) + " and " + g[-1]
        if task in ("niah_multivalue", "niah_multiquery"):
            q = (f"What are all the special magic {kind}s for {names} mentioned in the provided text?",
                 f"The special magic {kind}s for {names} mentioned in the provided text are")
            answers = [v for k, v, _ in needles if k in g]
            depth = None
        else:
            q = (f"What is the special magic {kind} for {names} mentioned in the provided text?",
                 f"The special magic {kind} for {names} mentioned in the provided text is")
            answers = [v for k, v, _ in needles if k == g[0]]
            depth = next(d for k, _, d in needles if k == g[0])
        questions.append((i, q[0] + close + q[1], answers, depth))
    if task not in ("niah_single", "niah_uuid") or a.needles >= len(needles):
        return [("", *niah_haystack(a, rng, task, length, used, kind, needles, questions), keys)]
    # --needles per haystack: the set's depths dealt at random to haystacks
    # of that many needles, each needle only a distractor for its haystack's others.
    order = rng.sample(range(len(needles)), len(needles))
    out = []
    for c in range(0, len(order), a.needles):
        part = sorted(order[c:c + a.needles])
        text, qs = niah_haystack(a, rng, task, length, used, kind, [needles[i] for i in part],
                                 [questions[i] for i in part])
        out.append((f"-n{c // a.needles}", text, qs, [keys[i] for i in part]))
    return out


def niah_haystack(a, rng, task, length, used, kind, needles, questions):
    """(text, questions): needles [(key, value, depth)] in a haystack sized
    for the longest question; depth None: at random."""
    opening, _ = TEMPLATES[a.template]
    instruction = (f"Some special magic {kind}s are hidden within the following text. "
                   f"Make sure to memorize it. I will quiz you about the {kind}s afterwards.")
    texts = [f"One of the special magic {kind}s for {k} is: {v}." for k, v, _ in needles]
    cpt = a.chars_per_token
    budget = (budget_tokens(a, length, task) - est_tokens(opening + instruction + "\n\n", cpt)
              - sum(est_tokens(t + " ", cpt) for t in texts) - max(est_tokens(q[1], cpt) for q in questions))
    hay = fill_haystack(a, rng, used, budget)
    if len(hay) < 2:
        sys.exit(f"{task}: length {length} leaves no room for a haystack around its needles and questions")
    pos = [rng.randint(0, len(hay)) if d is None else round(d * len(hay)) for _, _, d in needles]
    return opening + instruction + "\n" + place(hay, list(zip(pos, texts))) + "\n", questions


def vt(a, rng, task, length, used):
    chains, hops = 4, 4
    opening, close = TEMPLATES[a.template]
    instruction, question, answer = VT_PROMPT
    names = distinct(rng, chains * (hops + 1), lambda r: "".join(r.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(5)))
    values = distinct(rng, chains, lambda r: str(r.randint(10000, 99999)))
    statements = []
    for c in range(chains):
        var = names[c * (hops + 1):(c + 1) * (hops + 1)]
        statements.append([f"VAR {var[0]} = {values[c]}."] + [f"VAR {var[h + 1]} = VAR {var[h]}." for h in range(hops)])
    queries = [question.format(v=v) + close + answer.format(v=v) for v in values]
    cpt = a.chars_per_token  # a statement's random capitals are ~3 times prose's tokens a letter
    budget = (budget_tokens(a, length, task) - est_tokens(opening + instruction + "\n\n", cpt)
              - sum(est_tokens(s + " ", cpt, 3.0) for ss in statements for s in ss) - max(est_tokens(q, cpt) for q in queries))
    hay = fill_haystack(a, rng, used, budget)
    if len(hay) < 2:
        sys.exit(f"vt: length {length} leaves no room for a haystack around its chains")
    inserts, questions = [], []
    for c in range(chains):
        pos = sorted(rng.randint(0, len(hay)) for _ in range(hops + 1))
        inserts += list(zip(pos, statements[c]))
        questions.append((c, queries[c], names[c * (hops + 1):(c + 1) * (hops + 1)], round(pos[0] / len(hay), 4)))
    body = place(hay, inserts)
    return [("", opening + instruction + "\n" + body + "\n", questions, names)]


def cwe(a, rng, task, length, used):
    # RULER's frequencies: below 4k tokens 6 and 1, else 30 and 3.
    common_n, uncommon_n = (6, 1) if length < 4096 else (30, 3)
    opening, close = TEMPLATES[a.template]
    instruction, question, answer = CWE_PROMPT
    query = question + close + answer
    cpt, letters = a.chars_per_token, 1.6  # "12. word": digits a token each, the word one or two
    budget = (budget_tokens(a, length, task) - est_tokens(opening + instruction + "\n\n", cpt)
              - est_tokens(query, cpt))
    words = cwe_words()
    words = rng.sample(words, len(words))
    common, uncommon = words[:10], []
    items, cost = 0, 0.0

    def add(w, times):
        nonlocal items
        c = 0.0
        for _ in range(times):
            items += 1
            c += len(str(items)) + (len(w) * letters + 3) / cpt
        return c

    for w in common:
        cost += add(w, common_n)
    if cost > budget:
        sys.exit(f"cwe: length {length} is too short for 10 words {common_n} times each")
    for w in words[10:]:
        c = add(w, uncommon_n)
        if cost + c > budget:
            break
        cost += c
        uncommon.append(w)
    else:
        sys.exit(f"cwe: length {length} needs more than the {len(words)} words of the built-in list "
                 "(enough for ~15,000 tokens)")
    lst = common * common_n + uncommon * uncommon_n
    rng.shuffle(lst)
    body = " ".join(f"{i + 1}. {w}" for i, w in enumerate(lst))
    return [("", opening + instruction + "\n" + body + "\n", [(0, query, common, None)], words[:10 + len(uncommon)])]


def fwe(a, rng, task, length, used):
    # RULER's: word k of the vocabulary appears n k^-alpha / zeta(alpha)
    # times (alpha 2); the first is noise, the dots; the answers are the next three.
    opening, close = TEMPLATES[a.template]
    instruction, question, answer = FWE_PROMPT
    query = question + close + answer
    cpt, letters = a.chars_per_token, 2.4
    budget = (budget_tokens(a, length, task) - est_tokens(opening + instruction + "\n\n", cpt)
              - est_tokens(query, cpt))
    vocab = ["...."] + distinct(rng, 199, lambda r: "".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(5)))
    # " ....": one token. A coded word is 2-5 tokens, 3.3 on average; the
    # four most frequent make ~30% of the text: they are charged their most,
    # a token a letter, or one unlucky word could overflow the context.
    cost1 = ([est_tokens(vocab[0], cpt)] + [len(w) + 1 / cpt for w in vocab[1:5]]
             + [est_tokens(w + " ", cpt, letters) for w in vocab[5:]])
    zeta2 = math.pi ** 2 / 6

    def counts(n):
        return [int(n * k ** -2.0 / zeta2) for k in range(1, len(vocab) + 1)]

    def cost(n):
        return sum(c * w for c, w in zip(counts(n), cost1))

    lo, hi = 0, 16  # the most words within budget
    while cost(hi) <= budget:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if cost(mid) <= budget else (lo, mid)
    cnt = counts(lo)
    if not cnt[1] > cnt[2] > cnt[3] > cnt[4]:
        sys.exit(f"fwe: length {length} is too short to rank three coded words")
    lst = [w for w, c in zip(vocab, cnt) for _ in range(c)]
    rng.shuffle(lst)
    return [("", opening + instruction + "\n" + " ".join(lst) + "\n", [(0, query, vocab[1:4], None)], vocab)]


RULER_BUILD = {"niah_single": niah, "niah_uuid": niah, "niah_multikey": niah, "niah_multivalue": niah,
               "niah_multiquery": niah, "vt": vt, "cwe": cwe, "fwe": fwe}


def ruler(a, rng):
    groups, used = [], set()
    for task in a.tasks:
        for length in a.lengths:
            for h in range(a.aggregate_haystacks if task in ("cwe", "fwe") else a.haystacks):
                # A haystack's own generator: the same haystack whatever else is asked.
                hr = random.Random(f"{a.seed}:{task}:{length}:{h}")
                for suffix, text, questions, keys in RULER_BUILD[task](a, hr, task, length, used):
                    doc = f"{task}-{length}-h{h}{suffix}"
                    if len(set(keys)) != len(keys):
                        sys.exit(f"{doc}: needle keys repeat")
                    reqs = []
                    for k, query, answers, depth in questions:
                        r = {"id": f"{task}-{length}-h{h}-q{k}", "task": task, "prefix_doc": doc, "query": query,
                             "answers": answers, "max_tokens": RULER_MAX_TOKENS[task], "length": length}
                        if depth is not None:
                            r["depth"] = depth
                        if not 1 <= len(answers) <= 32 or not all(0 < len(x.encode()) <= 256 for x in answers):
                            sys.exit(f"{r['id']}: answers must be 1-32 strings of 1-256 bytes")
                        missing = [x for x in answers if x not in text]
                        if missing:
                            sys.exit(f"{r['id']}: answers {missing} are not in its document")
                        reqs.append(r)
                    groups.append(({"document": doc, "text": text}, reqs))
    reqs = [r for _, rs in groups for r in rs]
    rng.shuffle(reqs)  # haystacks' questions interleaved
    docs = {d["document"]: d for d, _ in groups}
    out = []
    for r in reqs:  # a document on the line before its first question
        if r["prefix_doc"] in docs:
            out.append(docs.pop(r["prefix_doc"]))
        out.append(r)
    width = max(len(t) for t in a.tasks)
    print(f"ruler: {len(reqs)} requests over {len(groups)} haystacks ({a.haystack}, --template {a.template})",
          file=sys.stderr)
    print(" " * (width + 2) + "".join(f"{n:>7}" for n in a.lengths), file=sys.stderr)
    for t in a.tasks:
        n = [sum(1 for r in reqs if r["task"] == t and r["length"] == length) for length in a.lengths]
        print(f"  {t:<{width}}" + "".join(f"{x:>7}" for x in n), file=sys.stderr)
    return out


# The suite's workloads: kind and flags per file, per size.
SUITE = {
    "quick": {
        "fewshot": ["fewshot", "--task", "mixed", "--requests", "12", "--min-prefix-chars", "1500"],
        "docqa": ["docqa", "--documents", "2", "--questions", "3", "--doc-chars", "2000"],
        "chat": ["chat", "--users", "2", "--rounds", "3", "--system-chars", "1500"],
    },
    "paper": {
        "fewshot": ["fewshot", "--task", "mixed", "--requests", "60", "--min-prefix-chars", "8000"],
        "docqa": ["docqa", "--documents", "4", "--questions", "10", "--doc-chars", "8500", "--order", "random"],
        "chat": ["chat", "--users", "8", "--rounds", "4", "--system-chars", "7500"],
    },
}


def write_suite(a):
    os.makedirs(a.out, exist_ok=True)
    for name, argv in SUITE[a.size].items():
        sub = parse(argv + ["--shared", a.shared, "--seed", str(a.seed)])
        lines = KINDS[sub.kind](sub, random.Random(a.seed))
        with open(os.path.join(a.out, name + ".jsonl"), "w", encoding="utf-8") as f:
            for line in lines:
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
        print(f"wrote {os.path.join(a.out, name + '.jsonl')}: {sum(1 for x in lines if 'query' in x)} requests",
              file=sys.stderr)


KINDS = {"fewshot": fewshot, "docqa": docqa, "chat": chat, "ruler": ruler}


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["fewshot", "docqa", "chat", "ruler", "suite"])
    ap.add_argument("--size", choices=["quick", "paper", "accuracy"],
                    help="suite: the workloads' size, quick (default) or paper; ruler: a preset, quick or accuracy")
    ap.add_argument("--out", help="suite: the directory to write to; ruler: the file (default: stdout)")
    ap.add_argument("--shared", default=SHARED, help="the shared folder (default: ../shared)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--task", choices=["piqa", "copa", "openbookqa", "mixed"], default="mixed")
    ap.add_argument("--requests", type=int, default=40, help="fewshot: questions")
    ap.add_argument("--shots-min", type=int, default=2)
    ap.add_argument("--shots-max", type=int, default=10)
    ap.add_argument("--min-prefix-chars", type=int, default=0)
    ap.add_argument("--reuse-mean", type=float, default=4.0)
    ap.add_argument("--reuse-sd", type=float, default=2.0)
    ap.add_argument("--documents", type=int, default=4)
    ap.add_argument("--questions", type=int, default=8, help="docqa: per document")
    ap.add_argument("--doc-chars", type=int, default=8000)
    ap.add_argument("--order", choices=["random", "tiled", "interleaved"], default="random")
    ap.add_argument("--users", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--system-chars", type=int, default=4000)
    ap.add_argument("--tasks", help="ruler: a comma list of " + ", ".join(RULER_TASKS) + " (default: all)")
    ap.add_argument("--lengths", help="ruler: a comma list of prompt lengths in tokens (default: 1024,2048,4096,8192)")
    ap.add_argument("--max-length", type=int, help="ruler: drop the lengths above this")
    ap.add_argument("--depths", type=int, help="ruler: the niah needles' depths, 0 ... 1, a question each (default: 11)")
    ap.add_argument("--haystacks", type=int, help="ruler: haystacks (niah_single and niah_uuid: sets of haystacks, "
                    "one per --needles needles) per task and length (default: 1)")
    ap.add_argument("--needles", type=int, default=1, help="ruler: niah_single and niah_uuid's needles per haystack "
                    "(default: 1, RULER's; up to --depths: every depth's needle in one haystack)")
    ap.add_argument("--haystack", choices=sorted(HAYSTACKS), default="wikitext2",
                    help="ruler: the corpus of the haystacks, wikitext2 (test.txt) or austen")
    ap.add_argument("--template", choices=sorted(TEMPLATES), default="chatml",
                    help="ruler: the chat template around instruction, haystack and question")
    ap.add_argument("--chars-per-token", type=float, default=3.9,
                    help="ruler: characters of prose per token of the model (SmolLM2: 3.9)")
    a = ap.parse_args(argv)
    for name in ("requests", "shots_min", "shots_max", "documents", "questions", "doc_chars", "users", "rounds"):
        if getattr(a, name) < 1:
            sys.exit(f"--{name.replace('_', '-')} must be at least 1")
    if a.shots_min > a.shots_max:
        sys.exit("--shots-min must not exceed --shots-max")
    if not os.path.isdir(os.path.join(a.shared, "data")):
        sys.exit(f"{a.shared}/data not found: this tool needs ../shared (or --shared DIR)")
    if a.kind == "suite" and not a.out:
        sys.exit("suite: --out DIR is required")
    if a.kind == "suite":
        a.size = a.size or "quick"
        if a.size not in SUITE:
            sys.exit(f"suite: --size {a.size}: the suite's sizes are quick and paper")
    if a.kind == "ruler":
        ruler_args(a)
    return a


def ruler_args(a):
    """ruler's flags: explicit ones, else --size's preset, else the defaults."""
    if a.size and a.size not in RULER_SIZES:
        sys.exit(f"ruler: --size {a.size}: ruler's sizes are quick and accuracy")
    preset = RULER_SIZES.get(a.size, {})
    # cwe and fwe ask one question per haystack: a preset gives them more.
    a.aggregate_haystacks = a.haystacks or preset.get("aggregate_haystacks")
    for name, default in RULER_DEFAULTS.items():
        if getattr(a, name) is None:
            setattr(a, name, preset.get(name, default))
    a.aggregate_haystacks = a.aggregate_haystacks or a.haystacks
    a.tasks = [t.strip() for t in a.tasks.split(",") if t.strip()]
    unknown = [t for t in a.tasks if t not in RULER_TASKS]
    if unknown or not a.tasks:
        sys.exit(f"--tasks: unknown task {', '.join(unknown) or '(none)'} (known: {', '.join(RULER_TASKS)})")
    a.tasks = list(dict.fromkeys(a.tasks))
    lengths = []
    for x in a.lengths.split(","):
        try:
            n = int(x)
        except ValueError:
            sys.exit(f"--lengths: '{x}' is not a whole number of tokens")
        if n < 1:
            sys.exit(f"--lengths: {n} is not a positive number of tokens")
        lengths.append(n)
    if a.max_length is not None:
        lengths = [n for n in lengths if n <= a.max_length]
        if not lengths:
            sys.exit(f"--max-length {a.max_length} drops every length of --lengths {a.lengths}")
    a.lengths = list(dict.fromkeys(lengths))
    if a.depths < 2:
        sys.exit("--depths must be at least 2 (needles at depth 0 and 1)")
    if a.depths > len(KEY_WORDS):
        sys.exit(f"--depths must be at most {len(KEY_WORDS)} (each needle of a haystack has its own key word)")
    if a.haystacks < 1:
        sys.exit("--haystacks must be at least 1")
    if a.needles < 1:
        sys.exit("--needles must be at least 1")
    if not a.chars_per_token > 0:
        sys.exit("--chars-per-token must be positive")
    a.haystack_path = os.path.join(a.shared, "data", *HAYSTACKS[a.haystack])
    if any(t not in ("cwe", "fwe") for t in a.tasks) and not os.path.isfile(a.haystack_path):
        sys.exit(f"{a.haystack_path}: not found (the --haystack {a.haystack} corpus; --shared DIR names the shared folder)")


def main():
    a = parse(sys.argv[1:])
    if a.kind == "suite":
        write_suite(a)
        return
    lines = KINDS[a.kind](a, random.Random(a.seed))
    if a.kind == "ruler" and a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            for line in lines:
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
        print(f"wrote {a.out}", file=sys.stderr)
        return
    for line in lines:
        print(json.dumps(line, ensure_ascii=False))


if __name__ == "__main__":
    main()
