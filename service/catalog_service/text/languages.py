"""Language profiles: what a catalog's ``language`` setting changes in the public search extras
(typo tolerance and word completions; docs/decisions/0025-catalog-language.md).

The lexicon is language-independent (Plone's words: lower case, Latin accents folded, no
stemming, no stop words), and so are Plone's own queries. A profile only says, for the extras:

- ``letters``: what one-edit candidates of a word are made of (``text.typos.edits1`` adds the
  word's own characters). Latin languages fold to ASCII in the lexicon, so their letters are
  ASCII's; Cyrillic, Greek, Hebrew and Arabic words are only lower-cased, so their letters are
  the alphabet as the lexicon holds it (Greek with its accented vowels: ``θαλασσα`` is one edit
  from ``θάλασσα``). A word with Latin letters gets the ASCII letters in any language.
- ``corrects``: whether correction by edit distance applies. Not for Chinese, Japanese, Korean,
  Thai and the scripts written like them without spaces: the lexicon holds their text as
  bigrams or fragments of syllables, where one edited character is no measure of a typo.
- ``stop_words``: the commonest function words, as the lexicon folds them: never offered as a
  completion or a correction, and never corrected.

The word lists are ours, written for this table.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

from .pipeline import normalize_word
from .typos import ASCII_LETTERS

__all__ = ["LANGUAGES", "Language", "language"]

DIGITS = "0123456789"
_LATIN_LETTERS = frozenset(string.ascii_lowercase)


@dataclass(frozen=True)
class Language:
    code: str
    name: str
    letters: str
    corrects: bool
    stop_words: frozenset[str]

    def letters_for(self, word: str) -> str:
        """The letters one-edit candidates of ``word`` are made of: ASCII for a word holding an
        ASCII letter (a Latin word, folded), the language's alphabet otherwise (digits only too:
        ``ΐ0000`` less its letter)."""
        return ASCII_LETTERS if _LATIN_LETTERS & set(word) else self.letters


def _folded(words: str) -> frozenset[str]:
    """The words as the lexicon holds them (written here as the language writes them)."""
    return frozenset(normalize_word(w) for w in words.split())


def _latin(code: str, name: str, stop_words: str) -> Language:
    return Language(code, name, ASCII_LETTERS, True, _folded(stop_words))


def _alphabet(code: str, name: str, letters: str, stop_words: str) -> Language:
    return Language(code, name, letters + DIGITS, True, _folded(stop_words))


def _unspaced(code: str, name: str) -> Language:
    return Language(code, name, "", False, frozenset())


RUSSIAN = "абвгдеёжзийклмнопрстуфхцчшщъыьэюя"
UKRAINIAN = "абвгґдеєжзиіїйклмнопрстуфхцчшщьюя"
BULGARIAN = "абвгдежзийклмнопрстуфхцчшщъьюя"
GREEK = "αβγδεζηθικλμνξοπρσςτυφχψωάέήίόύώϊϋΐΰ"
HEBREW = "אבגדהוזחטיכךלמםנןסעפףצץקרשת"
ARABIC = "ءآأؤإئابةتثجحخدذرزسشصضطظعغفقكلمنهوىي"

_PROFILES = [
    _latin("en", "English", """
        a about after all also an and any are as at be because been but by can could did do does
        for from had has have he her his how i if in into is it its me my no not of on only or
        other our out over she so some than that the their them then there these they this those
        to up us was we were what when where which while who will with would you your"""),
    _latin("de", "German", """
        aber alle als am an auch auf aus bei bin bis da damit dann das dass dem den denn der des
        die dies diese dieser doch du durch ein eine einem einen einer eines er es für hat hatte
        ich ihr im in ist ja kann mit nach nicht noch nur ob oder sich sie sind so um und uns von
        vor war was wenn werden wie wir wird wurde zu zum zur über"""),
    _latin("fr", "French", """
        à au aux avec ce ces cette dans de des du elle elles en est et été être eu il ils je la le
        les leur leurs lui ma mais me même mes moi mon ne nous on ou où par pas pour qu que qui sa
        se ses son sont sur ta te tes toi ton tu un une vos votre vous y c d j l m n s t"""),
    _latin("es", "Spanish", """
        a al algo como con cuando de del desde donde el él ella ellos en entre era es esta está
        este esto fue ha hay la las le les lo los más me mi muy ni no nos o para pero por porque
        que qué se sin sobre son su sus también te tu tú un una uno y ya yo"""),
    _latin("it", "Italian", """
        a ad al all alla alle anche che chi ci come con da dal dalla dei del dell della delle di
        e è ed gli ha hanno ho i il in io la le lei lo loro lui ma mi ne nel nell nella noi non o
        per più quando questa questo se si sono su sul sull sulla tra tu un una uno l d c"""),
    _latin("nl", "Dutch", """
        aan al als bij dan dat de der deze die dit door dus een en er geen had heb hebben heeft
        hem het hier hij hoe hun ik in is je kan maar me meer met mij mijn na naar niet nog nu of
        om omdat ons ook op over te tegen toch toen tot u uit van voor want was wat we wel werd
        wie wij wordt zal ze zich zij zijn zo zou"""),
    _latin("pt", "Portuguese", """
        a à ao aos as até com como da das de do dos e é ela ele eles em entre era essa esse esta
        este eu foi há isso já lhe mais mas me mesmo meu na nas não nem no nos o os ou para pela
        pelo por qual quando que se sem seu sua são também te tem um uma você"""),
    _latin("pl", "Polish", """
        a aby ale bardzo bez bo by był była było być co czy dla do gdy gdzie go i ich ja jak jako
        jego jej jest jeszcze już lub ma mi mnie na nad nie nich o od on ona one oni po pod przez
        przy się są ta tak także tam te tego tej ten to tu tylko w we więc z za ze że"""),
    _latin("sv", "Swedish", """
        att av de dem den denna det detta du där efter eller en ett från för genom han har hon
        honom hans hennes här i inte jag kan man med men mig min mitt nu när och om oss på sig
        sin sina sitt som så till under upp ut vad var vi vid än är över"""),
    _latin("da", "Danish", """
        af alle alt at blev da de dem den denne der deres det dette dig din du efter eller en er
        et for fra ham han hans har havde hende hun hvad hvis hvor i ikke jeg kan man med meget
        men mig min mod nu når og om op os på sig sin skal som så til ud under var vi ved være"""),
    _latin("no", "Norwegian", """
        alle at av da de dem den denne der det dette du eller en er et etter for fra han hans har
        hadde henne hun hva hvis hvor i ikke jeg kan man med men meg min mot nå når og om opp oss
        på seg sin skal som så til ut var vi ved være vil"""),
    _latin("fi", "Finnish", """
        ei en et että he hän ja jo joka jos jotka kanssa koska kuin kun me mikä minä mitä mukaan
        mutta myös niin nyt ole olen oli olla on ovat se sen siis sinä sitä tai te tämä tässä
        vaan vai vielä voi"""),
    _latin("cs", "Czech", """
        a aby ale ani asi by byl byla bylo být co do i jak jako je jeho jej její jen jsem jsou
        již k kde kdo když ke která které který mezi mi na nad ne než o od po pod pro proto
        protože při s se si ta tak také tam to tu u v ve však z za ze že"""),
    _alphabet("ru", "Russian", RUSSIAN, """
        а без бы был была были было быть в вам вас во вот все всё вы где да для до его ее её если
        есть еще ещё же за и из или им их к как когда ко кто ли мне мы на над не него нет ни но о
        об он она они оно от по под при с со так также там то только у уже чем что чтобы это я"""),
    _alphabet("uk", "Ukrainian", UKRAINIAN, """
        а але б би без був була були було бути в від вже ви він вона вони воно все де для до є
        же з за і із й коли крім ми між на над не ні по під при про та так також там те то тому
        у хто це цей ця через що щоб як який якщо я"""),
    _alphabet("bg", "Bulgarian", BULGARIAN, """
        а аз без би в във все вие да до е за и из или как като които който към ли му на над не
        ние но няма о от по под при с са се си след със също та така те то той тя у че ще"""),
    _alphabet("el", "Greek", GREEK, """
        αλλά από αυτή αυτό αυτός για δεν εγώ είναι εκεί ένα έναν ενός ή η θα και κάθε κατά με
        μετά μη μην μια μόνο να ο οι όπως όταν ότι πολύ που πριν προς πως σε στα στη στην στις
        στο στον στους τα τη την της τι τις το τον του τους των ως"""),
    _alphabet("he", "Hebrew", HEBREW, """
        של את על עם זה זו זאת הוא היא הם הן אני אתה אנחנו לא כן כי אם או גם רק כל יש אין היה
        הייתה היו מה מי איך למה אבל עוד כמו אל בין אחרי לפני כך אז שם פה כאן אשר ידי"""),
    _alphabet("ar", "Arabic", ARABIC, """
        في من على إلى عن مع أن إن لا ما هذا هذه ذلك تلك التي الذي الذين هو هي هم أنا نحن أنت
        كان كانت قد لم لن كل بعد قبل بين أو ثم حتى إذا عند غير أي منذ كما لكن ولا وهو وهي وقد
        فقد أيضا"""),
    _unspaced("zh", "Chinese"),
    _unspaced("ja", "Japanese"),
    _unspaced("ko", "Korean"),
    _unspaced("th", "Thai"),
    _unspaced("lo", "Lao"),
    _unspaced("km", "Khmer"),
    _unspaced("my", "Burmese"),
]

LANGUAGES: dict[str, Language] = {p.code: p for p in _PROFILES}


def language(code: str | None) -> Language | None:
    """The profile of a catalog's ``language`` setting; None for none."""
    return None if code is None else LANGUAGES[code]
