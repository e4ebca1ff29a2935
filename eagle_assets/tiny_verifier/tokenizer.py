"""The tiny verifiers' tokenizer: byte-level BPE trained on the task text, plus a chat markup: its
special tokens, think tags and chat template (a ``.jinja`` file beside this one). Qwen3's ChatML for
the default verifier, Kimi-K2.5's ``<|im_user|>``/``<|im_assistant|>`` markup for tiny-kimi."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from eagle_assets.tiny_verifier.corpus import Conversation

IM_END = "<|im_end|>"
THINK_START = "<think>"
THINK_END = "</think>"


@dataclass(frozen=True)
class ChatMarkup:
    """A chat format. Its markers are special tokens (dropped by skip_special_tokens); the think tags
    are plain added tokens, so decoded text keeps them and vLLM's reasoning parsers (qwen3, kimi_k2:
    both split on ``<think>``/``</think>``) see them as text and as single token ids."""

    special_tokens: tuple[str, ...]
    eos: str
    pad: str
    template_file: str
    think_tokens: tuple[str, str] = (THINK_START, THINK_END)

    @property
    def chat_template(self) -> str:
        return Path(__file__).with_name(self.template_file).read_text()


QWEN_MARKUP = ChatMarkup(
    special_tokens=("<|endoftext|>", "<|im_start|>", IM_END),
    eos=IM_END,
    pad="<|endoftext|>",
    template_file="chat_template.jinja",
)
# Kimi-K2.5's role markers and media tokens (the wrapper's config names <|media_pad|> as its image token).
KIMI_MARKUP = ChatMarkup(
    special_tokens=(
        "[PAD]",
        IM_END,
        "<|im_user|>",
        "<|im_assistant|>",
        "<|im_system|>",
        "<|im_middle|>",
        "<|media_begin|>",
        "<|media_content|>",
        "<|media_end|>",
        "<|media_pad|>",
    ),
    eos=IM_END,
    pad="[PAD]",
    template_file="kimi_chat_template.jinja",
)

# GPT-2's split pattern with one digit per piece (as Qwen's tokenizers split numbers), keeping the
# leading space on the digit: " 85" -> " 8", "5". Numbers stay digit-wise learnable and short.
SPLIT_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def train_tokenizer(texts: Iterable[str], vocab_size: int, markup: ChatMarkup = QWEN_MARKUP) -> PreTrainedTokenizerFast:
    """Train byte-level BPE on ``texts`` and wrap it as a transformers tokenizer with the markup's template."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[*markup.special_tokens, *markup.think_tokens],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte is encodable: no <unk>
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in markup.special_tokens])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in markup.think_tokens])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=markup.eos,
        pad_token=markup.pad,
        chat_template=markup.chat_template,
        model_max_length=1 << 20,
        clean_up_tokenization_spaces=False,
    )


def conversation_texts(conversations: Iterable[Conversation]) -> Iterable[str]:
    """The plain text of conversations (no markup), the tokenizer's training corpus."""
    for conv in conversations:
        for message in conv.messages:
            yield message["content"]
        yield f"{conv.reasoning}\n\n{conv.answer}"


def encode_conversation(tokenizer: PreTrainedTokenizerFast, conv: Conversation) -> tuple[list[int], list[int]]:
    """Token ids and a loss mask (prompt 0, completion 1) for one conversation.

    The prompt is rendered exactly as vLLM renders it (the template with a generation prompt) and the
    completion is what the template adds for the assistant turn, up to and including ``<|im_end|>``,
    so training rows and served tokens agree.
    """
    kwargs = {"enable_thinking": conv.enable_thinking}
    prompt = tokenizer.apply_chat_template(conv.messages, add_generation_prompt=True, tokenize=False, **kwargs)
    reply = {"role": "assistant", "content": conv.answer, "reasoning_content": conv.reasoning}
    full = tokenizer.apply_chat_template([*conv.messages, reply], tokenize=False, **kwargs)
    if not full.startswith(prompt):
        raise ValueError(f"chat template renders the prompt inconsistently: {prompt!r} vs {full!r}")
    completion = full[len(prompt) :].removesuffix("\n")
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    completion_ids = tokenizer.encode(completion, add_special_tokens=False)
    return prompt_ids + completion_ids, [0] * len(prompt_ids) + [1] * len(completion_ids)
