"""Words: the one home of Rampart's tokenisers, stop-word lists and stemmer.

Every lexical comparison outside BM25 (whose analyser lives in the index) reads text through this
module: the fact-check's detectors and strip coverage, the chain's and the corrective loop's query
words, chunk headers' key terms, entity mentions, title links, opening names. There are four
tokenisers and two stop-word lists because the jobs read different units; each variant below says
why it differs. Merging them would change what the callers compute: on 28,835 real texts (SciFact,
HotpotQA, 2Wiki, NQ-open, PoisonedRAG, the attack sets, samples/) :data:`WORD` and
:data:`JOINED_WORD` give different tokens for 13,353, :data:`WORD` and :data:`SPELLED_WORD` for 6,025;
:func:`terms` with the two stop lists merged changes for 18,384 and key terms for 2 of 5,000
documents. One stemmer serves all (Snowball English, as BM25's analyser).
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache

import Stemmer

# A word for comparing texts by their terms: letters/digits with at most one inner apostrophe ("don't",
# "James's" stay whole), split at dots and hyphens ("COVID-19" -> "COVID", "19"). The fact-check's
# detectors and thresholds (coverage, stuffing, query copy, planted claims) were tuned on this unit.
WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")

# A word as a name or key term is written: inner apostrophes, dots and hyphens keep it whole ("F.C.",
# "Ka-san", "COVID-19", "e.g"), so an entity key or a chunk header's key term is the unit a reader sees.
JOINED_WORD = re.compile(r"[^\W_]+(?:['’.\-][^\W_]+)*")

# A token of an opening name (``subjects.lead_name``): a word that also keeps ampersands and en/em
# dashes ("AT&T", "2017–18"), or one punctuation mark that ends a name (comma, colon, bracket, quote).
NAME_TOKEN = re.compile(r"[^\W_][\w'’.&\-–—]*\w|[^\W_]|[,;:()\"“”]")

# A word as a title is spelled (``titles.spelled``): case kept (case tells a title from a common word)
# and split at apostrophes, so "James's" and "James’s" both spell "James s".
SPELLED_WORD = re.compile(r"\w+")

# Function words and question words: they carry no topic, so neither coverage nor stuffing counts
# them, and query rewriting drops them. Content words such as "first", "new" or "two" stay: a question
# may turn on them ("who was first ...").
STOP_WORDS = frozenset(
    """
    a about above after again against all also am an and any are aren as at be because been before
    being below between both but by can could couldn did didn do does doesn doing don down during
    each etc few for from further had has have having he her here hers herself him himself his how i
    if in into is isn it its itself just many may me might more most much must my myself no nor not
    of off on once one ones only or other our ours ourselves out over own per s same shall she
    should shouldn so some such t than that the their theirs them themselves then there these they
    this those through to too under until up very via was wasn we were weren what when where which
    while who whom why will with won would wouldn you your yours yourself yourselves
    """.split()  # noqa: SIM905  (one readable block, not 150 lines)
)

# Words that make poor key terms of a chunk header (``ingest.chunk_header``): the function words (with
# contractions written whole, as :data:`JOINED_WORD` reads them) plus everyday verbs, adverbs and
# numerals ("made", "several", "however", "two") that are frequent in a chunk without naming what it
# is about. Broader than :data:`STOP_WORDS`, which must keep such words for the query's terms.
KEY_TERM_STOP_WORDS = frozenset(
    """
    a about above after again against all also am an and any are aren't as at be because been before
    being below between both but by can can't cannot could couldn't did didn't do does doesn't doing
    don't down during each either else etc e.g eg even ever every few for from further get gets got had
    hadn't has hasn't have haven't having he he'd he'll he's her here here's hers herself him himself his
    how how's however i i'd i'll i'm i've i.e ie if in into is isn't it it's its itself just let's like
    may might more most much must mustn't my myself neither no nor not now of off often on once one only
    or other others otherwise ought our ours ourselves out over own per rather same shall shan't she
    she'd she'll she's should shouldn't since so some such than that that's the their theirs them
    themselves then there there's therefore these they they'd they'll they're they've this those though
    through thus to too under until up upon us use used using very via was wasn't we we'd we'll we're
    we've were weren't what what's when when's where where's whether which while who who's whom whose
    why why's will with within without won't would wouldn't yes yet you you'd you'll you're you've your
    yours yourself yourselves new see well across among along already always another around away back
    become becomes come comes first given going including last less let made make makes many next non
    onto put said say says second set several still take takes two three unless whereas
    """.split()  # noqa: SIM905
)

_local = threading.local()  # PyStemmer objects are not thread-safe: one per thread


def words(text: str) -> list[str]:
    """Lower-cased :data:`WORD` tokens of ``text``, in order."""
    return [w.lower() for w in WORD.findall(text)]


def content_word(word: str) -> bool:
    """Whether a lower-cased word carries content: not a stop word, and not a single letter (a single
    digit counts)."""
    return word not in STOP_WORDS and (len(word) > 1 or word.isdigit())


@lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """The Snowball English stem of a lower-cased word ("policies" -> "polici"); cached across threads,
    computed with the calling thread's own stemmer."""
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = Stemmer.Stemmer("english")
    return str(stemmer.stemWord(word))


def terms(text: str) -> list[str]:
    """Stemmed content terms of ``text`` in order (:func:`words` that are :func:`content_word`)."""
    return [stem(w) for w in words(text) if content_word(w)]
