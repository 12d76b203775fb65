"""Hugging Face Transformers integration: one call puts detfuse's attention and
fused linear + cross-entropy into a causal language model.

    import detfuse.hf
    model = AutoModelForCausalLM.from_config(cfg)        # Llama, Qwen2, Mistral, Gemma-2
    detfuse.hf.apply(model, attention=True, loss=True)
    out = model(input_ids=ids, labels=ids)               # out.loss: fused, no [tokens, vocab] logits

attention=True registers detfuse.torch.attention with transformers'
AttentionInterface (and a mask function with AttentionMaskInterface) under the
name "detfuse" and switches the model to it. Each layer passes its own
features: the scale (Gemma-2's query_pre_attn_scalar), causal, Gemma-2's
attn_logit_softcapping (-> softcap) and the sliding window of the layers that
have one (Mistral's sliding_window, Gemma-2's and Qwen2's sliding layers ->
window; a window at least as long as the keys excludes nothing and is passed
as 0). A feature the library's variants lack is refused with the library's
message (NotImplementedError naming the feature): the softcap at apply()
where a GPU is present, a window when a batch longer than it comes. Never
ignored.
Padding masks, packed sequences (position_ids that restart), custom 4-D masks,
attention dropout and output_attentions are refused with a message.

loss=True replaces the model's forward for training: when the model is in
training mode and labels (or shift_labels) are given, the final hidden states
go straight to detfuse.torch.linear_cross_entropy with lm_head's weight, so
the [tokens, vocab] logits are never formed (out.logits is None). Labels are
shifted and -100 ignored exactly as transformers' ForCausalLMLoss does
(labels padded with ignore_index on the right, then shifted by one; or
shift_labels used as given); with num_items_in_batch the loss is the sum over
the batch divided by it (as transformers' fixed_cross_entropy), else the mean
over the non-ignored tokens. Gemma-2's final_logit_softcapping becomes the
fused loss's softcap. In eval mode, or without labels, the original forward
runs (logits as usual).

Precision: under torch.autocast the loss takes the hidden states and the
weight in the autocast dtype (bf16), as lm_head would; otherwise both must
share a dtype (bf16 or fp32; fp16 is refused).
"""
import types
from typing import Optional

from . import _lib
from . import torch as dt

NAME = "detfuse"
SUPPORTED = ("llama", "qwen2", "mistral", "gemma2")

_registered = False


def _torch():
    return dt._torch()


# ------------------------------------------------------------------ attention

def _is_tracing(x=None) -> bool:
    torch = _torch()
    if dt._compiling():
        return True
    try:
        from transformers.utils.import_utils import is_tracing
        return bool(is_tracing(x))
    except ImportError:  # pragma: no cover - older transformers
        return isinstance(x, torch.fx.Proxy)


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, sliding_window=None,
                      softcap=None, **kwargs):
    """transformers AttentionInterface function: query [B, H, S, d], key and
    value [B, Hkv, Sk, d]; returns (output [B, S, H, d], None)."""
    if attention_mask is not None:
        raise ValueError("detfuse attention: got an attention mask tensor: padding masks, packed sequences "
                         "(position_ids that restart), custom masks and caches whose keys are not bottom-right "
                         "aligned with the queries (a sliding-window cache past its window) are not supported (pass "
                         "attention_mask=None for unpadded batches; detfuse applies the causal and sliding-window "
                         "masks itself)")
    if dropout:
        raise ValueError(f"detfuse attention: attention dropout {dropout} is not supported (set the config's "
                         f"attention_dropout to 0)")
    if kwargs.get("output_attentions"):
        raise ValueError("detfuse attention: output_attentions=True is not supported (the weights are never formed)")
    if kwargs.get("position_bias") is not None or kwargs.get("s_aux") is not None:
        raise ValueError("detfuse attention: position biases and attention sinks are not supported")
    is_causal = kwargs.get("is_causal")
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    opts = getattr(module, "_detfuse_attention", None) or {}
    Sk = key.shape[2]
    window = 0
    if sliding_window is not None and sliding_window > 0:
        # Hugging Face's sliding window: query i sees keys j > i + (Sk - Sq) - W; with Sk <= W no key is outside.
        window = int(sliding_window) if Sk > sliding_window else 0
    cap = float(softcap) if softcap else None
    torch = _torch()
    device_type = query.device.type
    if device_type in ("cuda", "cpu") and torch.is_autocast_enabled(device_type):  # (no autocast on meta)
        # As SDPA under autocast: the rotary embedding leaves q and k in fp32
        # (fp32 cos/sin) while v is in the autocast dtype; all three run in it.
        dtype = torch.get_autocast_dtype(device_type)
        query, key, value = (t.to(dtype) for t in (query, key, value))
    try:
        out = dt.attention(query, key, value, causal=bool(is_causal), scale=scaling, softcap=cap,
                           window=window or None, variant=opts.get("variant", "tuned"),
                           backward_variant=opts.get("backward_variant"), db=opts.get("db", "detfuse.db"),
                           allow_nondeterministic=opts.get("allow_nondeterministic", False))
    except _lib.InvalidArgument as e:
        if not (window or cap):
            raise
        needs = ", ".join(f for f in ((f"softcap={cap:g}" if cap else ""),
                                      (f"sliding window {window} over {Sk} keys" if window else "")) if f)
        raise NotImplementedError(f"detfuse attention: layer {getattr(module, 'layer_idx', '?')} needs {needs}, "
                                  f"which this build of detfuse cannot run: {e}") from None
    return out.transpose(1, 2).contiguous(), None


def attention_mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, mask_function=None,
                   attention_mask=None, allow_is_causal_skip=True, local_size=None, **kwargs):
    """transformers AttentionMaskInterface function: None when the mask is the
    plain causal (or causal sliding-window) pattern that detfuse applies
    itself, bottom-right aligned; otherwise the materialised boolean mask,
    which attention_forward then refuses with a message."""
    from transformers.masking_utils import prepare_padding_mask, sdpa_mask

    padding = prepare_padding_mask(attention_mask, kv_length, kv_offset)
    plain_ints = isinstance(q_offset, int) and isinstance(kv_offset, int)
    aligned = plain_ints and kv_offset == 0 and q_offset + q_length == kv_length
    tracing = _is_tracing(padding)
    if tracing:
        # Under torch.compile transformers cannot tell packed position_ids from
        # plain ones (allow_is_causal_skip is then False); apply()'s input check
        # refuses user position_ids and masks while compiling, so the model's
        # own arange positions are what remains.
        no_padding = padding is None
        skip_ok = True
    else:
        no_padding = padding is None or bool(padding.all())
        skip_ok = allow_is_causal_skip
    if aligned and no_padding and skip_ok:
        return None
    kw = dict(kwargs)
    kw.pop("dtype", None)
    kw.pop("config", None)
    return sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                     kv_offset=kv_offset, mask_function=mask_function, attention_mask=attention_mask,
                     allow_is_causal_skip=False, local_size=local_size, **kw)


def register() -> None:
    """Registers "detfuse" with transformers' AttentionInterface and
    AttentionMaskInterface (once)."""
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, attention_forward)
    AttentionMaskInterface.register(NAME, attention_mask)
    _registered = True


def _input_check(module, args, kwargs):
    """Forward pre-hook on the decoder (model.model): refuses inputs whose mask
    detfuse cannot apply, before any work."""
    torch = _torch()
    am = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)
    pos = kwargs.get("position_ids", args[2] if len(args) > 2 else None)
    if isinstance(am, dict) or (isinstance(am, torch.Tensor) and am.dim() != 2):
        raise ValueError("detfuse.hf: custom attention masks (4-D tensors, per-layer dicts) are not supported; "
                         "pass attention_mask=None")
    compiling = dt._compiling()
    if isinstance(am, torch.Tensor):
        if compiling:
            raise ValueError("detfuse.hf: under torch.compile pass attention_mask=None (detfuse supports no padding, "
                             "and whether a mask pads cannot be checked while tracing)")
        if not bool(am.all()):
            raise ValueError("detfuse.hf: the attention_mask pads some positions; padding masks are not supported by "
                             "detfuse attention (use unpadded batches of equal length, attention_mask=None)")
    if isinstance(pos, torch.Tensor) and am is None and kwargs.get("past_key_values") is None:
        if compiling:
            raise ValueError("detfuse.hf: under torch.compile pass position_ids=None (packed sequences are not "
                             "supported, and restarting position_ids cannot be checked while tracing)")
        from transformers.masking_utils import find_packed_sequence_indices

        p = pos if pos.dim() == 2 else pos.unsqueeze(0)
        if find_packed_sequence_indices(p) is not None:
            raise ValueError("detfuse.hf: position_ids restart inside a row (packed sequences); detfuse attention "
                             "does not support packed sequences")


def _layer_features(model):
    """[(layer name, module, softcap, sliding window)] of the attention layers."""
    cfg = model.config
    out = []
    for name, m in model.named_modules():
        if not (hasattr(m, "q_proj") and hasattr(m, "k_proj") and hasattr(m, "layer_idx")):
            continue
        softcap = getattr(m, "attn_logit_softcapping", None)
        if softcap is None and hasattr(cfg, "attn_logit_softcapping"):
            softcap = cfg.attn_logit_softcapping
        window = getattr(m, "sliding_window", None)
        if window is None and getattr(cfg, "model_type", "") == "mistral":
            window = getattr(cfg, "sliding_window", None)  # Mistral passes the config's to every layer
        out.append((name, m, softcap, window))
    return out


def _probe(model, features, variant, backward_variant, db, allow):
    """Asks the library, on the current GPU, whether it can run each layer's
    attention (forward and backward) with the layer's softcap; raises with the
    library's reason when not. (A sliding window matters only for sequences
    longer than it: it is checked when such a batch comes, by the library,
    and refused there with the same kind of message.) No GPU: nothing to ask."""
    torch = _torch()
    if not torch.cuda.is_available() or _lib.device_count() == 0:
        return
    cfg = model.config
    H = cfg.num_attention_heads
    Hkv = getattr(cfg, "num_key_value_heads", None) or H
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // H
    seen = set()
    for name, m, softcap, _window in features:
        if softcap in seen:
            continue
        seen.add(softcap)
        p = _lib.make_attention_problem(1, H, Hkv, 128, 128, d, dtype=_lib.DTYPE_BF16, causal=True,
                                        scale=float(getattr(m, "scaling", 0.0) or 0.0), softcap=float(softcap or 0.0))
        try:
            _lib.attention_validate(p)
            for mode, v in ((_lib.ATTENTION_FORWARD, variant), (_lib.ATTENTION_BACKWARD, backward_variant or variant)):
                _lib.attention_choose(p, mode, _lib.make_selection(v, db, allow))
        except _lib.InvalidArgument as e:
            needs = f"softcap={softcap:g}, head dim {d}" if softcap else f"head dim {d}"
            raise NotImplementedError(
                f"detfuse.hf.apply: {cfg.model_type} layer {name} needs attention with {needs}, which this build of "
                f"detfuse cannot run: {e}. Pass attention=False to keep the model's attention and use only the "
                f"fused loss.") from None


# ------------------------------------------------------------------ loss

def causal_lm_loss(hidden, weight, labels=None, *, shift_labels=None, num_items_in_batch=None, ignore_index=-100,
                   softcap=None, **options):
    """transformers' ForCausalLMLoss on hidden states instead of logits:
    hidden [B, S, D], weight [V, D] (lm_head), labels [B, S] (shifted here as
    transformers shifts them) or shift_labels [B, S] (used as given)."""
    torch = _torch()
    if shift_labels is None:
        if labels is None:
            raise ValueError("causal_lm_loss: labels or shift_labels is required")
        shift_labels = torch.nn.functional.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    shift_labels = shift_labels.to(hidden.device)
    if tuple(shift_labels.shape) != tuple(hidden.shape[:-1]):
        raise ValueError(f"labels: shape {tuple(shift_labels.shape)} does not match the hidden states' "
                         f"{tuple(hidden.shape[:-1])}")
    dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else hidden.dtype
    if dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"detfuse.hf loss: hidden states in {dtype}; detfuse's loss runs in bfloat16 or float32 "
                        f"(use bf16 autocast, or a bf16/fp32 model)")
    x = hidden.to(dtype)
    w = weight.to(dtype)
    reduction = "sum" if num_items_in_batch is not None else "mean"
    loss = dt.linear_cross_entropy(x, w, shift_labels.long(), ignore_index=ignore_index, reduction=reduction,
                                   softcap=float(softcap or 0.0), **options)
    if num_items_in_batch is not None:
        if torch.is_tensor(num_items_in_batch):
            num_items_in_batch = num_items_in_batch.to(loss.device)
        loss = loss / num_items_in_batch
    return loss


def _fused_forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                   inputs_embeds=None, labels=None, use_cache=None, logits_to_keep=0, **kwargs):
    """CausalLM forward with the fused loss (training mode with labels); else the original forward."""
    shift_labels = kwargs.get("shift_labels")
    if not self.training or (labels is None and shift_labels is None):
        return self._detfuse_original_forward(input_ids=input_ids, attention_mask=attention_mask,
                                              position_ids=position_ids, past_key_values=past_key_values,
                                              inputs_embeds=inputs_embeds, labels=labels, use_cache=use_cache,
                                              logits_to_keep=logits_to_keep, **kwargs)
    from transformers.modeling_outputs import CausalLMOutputWithPast

    if not (isinstance(logits_to_keep, int) and logits_to_keep == 0):
        raise ValueError("detfuse.hf loss: logits_to_keep must be 0 when computing the loss (every position's "
                         "hidden state goes to the fused loss)")
    return_dict = kwargs.pop("return_dict", None)
    kwargs.pop("shift_labels", None)
    num_items = kwargs.get("num_items_in_batch")
    ignore_index = kwargs.get("ignore_index", -100)
    outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=past_key_values, inputs_embeds=inputs_embeds, use_cache=use_cache, **kwargs)
    hidden = outputs.last_hidden_state
    head = self.lm_head
    if getattr(head, "bias", None) is not None:
        raise ValueError("detfuse.hf loss: lm_head has a bias, which the fused loss does not take")
    opts = self._detfuse_loss_options
    loss = causal_lm_loss(hidden, head.weight, labels, shift_labels=shift_labels, num_items_in_batch=num_items,
                          ignore_index=ignore_index, softcap=getattr(self.config, "final_logit_softcapping", None),
                          **opts)
    out = CausalLMOutputWithPast(loss=loss, logits=None, past_key_values=outputs.past_key_values,
                                 hidden_states=outputs.hidden_states, attentions=outputs.attentions)
    return out.to_tuple() if return_dict is False else out


# ------------------------------------------------------------------ apply

def apply(model, attention: bool = True, loss: bool = True, *, variant: str = "tuned",
          attention_variant: str = "tuned", backward_variant: Optional[str] = None, db: str = "detfuse.db",
          allow_nondeterministic: bool = False, grad_in_forward: bool = True):
    """Puts detfuse into a Hugging Face causal LM (Llama, Qwen2, Mistral,
    Gemma-2) in place and returns it. attention: detfuse attention through
    AttentionInterface; loss: the fused loss from the final hidden states in
    training mode. variant / grad_in_forward: the loss's (detfuse.torch.
    linear_cross_entropy); attention_variant / backward_variant: the
    attention's ("tuned": the store `db`, then the nearest tuned shape, then
    the heuristic). Raises ValueError for an unsupported model and
    NotImplementedError when the model needs an attention feature this build
    lacks (the message names it and the library's reason)."""
    cfg = getattr(model, "config", None)
    mtype = getattr(cfg, "model_type", None)
    if mtype not in SUPPORTED:
        raise ValueError(f"detfuse.hf.apply: model type {mtype!r} is not supported (supported: "
                         f"{', '.join(SUPPORTED)})")
    if getattr(model, "_detfuse_applied", False):
        raise ValueError("detfuse.hf.apply: already applied to this model")
    for name, v in (("variant", variant), ("attention_variant", attention_variant)):
        dt._check_variant(v, name)
    if attention:
        if getattr(cfg, "attention_dropout", 0.0):
            raise ValueError(f"detfuse.hf.apply: attention_dropout {cfg.attention_dropout} is not supported (set it "
                             f"to 0 in the config)")
        register()
        features = _layer_features(model)
        if not features:
            raise ValueError(f"detfuse.hf.apply: found no attention layers in {type(model).__name__}")
        _probe(model, features, attention_variant, backward_variant, db, allow_nondeterministic)
        opts = dict(variant=attention_variant, backward_variant=backward_variant, db=db,
                    allow_nondeterministic=allow_nondeterministic)
        for _, m, _, _ in features:
            m._detfuse_attention = opts
        model.set_attn_implementation(NAME)
        if getattr(model.config, "_attn_implementation", None) != NAME:
            raise RuntimeError(f"detfuse.hf.apply: transformers kept attention implementation "
                               f"{model.config._attn_implementation!r}")
        model.model.register_forward_pre_hook(_input_check, with_kwargs=True)
    if loss:
        if not (hasattr(model, "model") and hasattr(model, "lm_head")):
            raise ValueError(f"detfuse.hf.apply: {type(model).__name__} has no .model and .lm_head (a *ForCausalLM "
                             f"model is needed for loss=True)")
        model._detfuse_loss_options = dict(variant=variant, db=db, grad_in_forward=grad_in_forward,
                                           allow_nondeterministic=allow_nondeterministic)
        model._detfuse_original_forward = model.forward
        model.forward = types.MethodType(_fused_forward, model)
    model._detfuse_applied = True
    return model
