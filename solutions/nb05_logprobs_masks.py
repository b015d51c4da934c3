# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
#   course:
#     profile: PT-CPU
# ---

# %% [markdown]
# # 第 5 课　对数概率与掩码：在一个真实的小模型上
#
# ## 导读
#
# 前几课的损失函数都假设两样东西已经准备好：每个回答词元的对数概率 `logps`（形状 `[B, T]`），
# 以及说明哪些位置参与损失的 `completion_mask`。这一课在一个真正的 `transformers` 模型上把它们算出来：
#
# 1. **EOS 掩码**：生成结果里，第一个结束符（EOS）之后的词元和填充位都不能进入损失。你将实现 `completion_mask_from_eos`；
# 2. **提示与回答的对齐**：把“提示 + 回答”拼成一行送进模型，逐个词元打印 `attention_mask` 和 `response_mask`；
# 3. **错一位**：位置 `t` 的 logits 预测的是位置 `t+1` 的词元。你将实现错位取值 `shifted_token_logps`，并和课程运行时对照；
# 4. **序列与词元对数概率**：求和、求均值，各自对应什么；
# 5. **显存/内存**：朴素的 `log_softmax` 会复制一份 `[B, T, V]`，选择性的写法不会——我们在本机上实测峰值内存。
#
# 用的模型是课程在本地构建的微型 Qwen2 结构检查点（2 层、隐藏维 64、词表约 512，权重随机初始化）。
# 它和 Qwen2.5 走的是同一条代码路径：`AutoTokenizer` / `AutoModelForCausalLM.from_pretrained(...)`、ChatML 聊天模板、`<|im_end|>` 结束符。
# 权重是随机的，所以它输出的文字没有意义；本课关心的是张量的形状、对齐和数值，这些与权重无关。

# %% [markdown]
# ## 运行环境
#
# - Profile：**PT-CPU**（torch + transformers；不需要 GPU，不联网下载任何权重）。
# - 第一次运行时 `tools.tiny_model` 会在课程目录的 `.cache/` 下构建微型检查点，之后直接复用。
# - 运行时间：`make bench` 在**空闲的** 2 核 CPU 上测量本课（不含内核启动；第 5 步的内存实测占了大部分）；
#   机器繁忙时可能慢 2–4 倍。笔记本最后一个代码单元会打印这次运行实际用了多少秒，以它为准。
# - 掩码、名称等约定见课程的[约定卡](../../docs/CONVENTIONS.md)（C1–C6）与术语表。
#
# ## 前置阅读
#
# - 第 2 课：GRPO 目标里的逐词元概率比 `exp(logp_new − logp_old)` 和按 `completion_mask` 的逐序列平均。
# - 第 3 课：GSPO 的序列级概率比用的是“掩码内对数概率比的平均”。
# - MiniMind 的 `train_grpo.py`：先用 EOS 截断出 `completion_mask`，再用 `log_softmax(logits[:, :-1]).gather(outputs[:, 1:])` 取当前策略和参考策略的词元对数概率。

# %%
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import tools
from tools.grading import assert_close, expect_value_error
from tools.post_training_runtime import build_response_batch, response_sequence_logps, selective_log_softmax
from tools.tiny_model import tiny_checkpoint_path

_lesson_started = time.perf_counter()
torch.manual_seed(0)
torch.set_num_threads(min(2, torch.get_num_threads()))

CHECKPOINT = tiny_checkpoint_path(seed=0)
tokenizer = AutoTokenizer.from_pretrained(CHECKPOINT, local_files_only=True)
model = AutoModelForCausalLM.from_pretrained(CHECKPOINT, local_files_only=True)
model.eval()
EOS_ID = tokenizer.eos_token_id
PAD_ID = tokenizer.pad_token_id
print(f"检查点：{CHECKPOINT.name}，{type(model).__name__}，参数 {sum(p.numel() for p in model.parameters()):,} 个")
print(f"词表大小 V = {model.config.vocab_size}；eos = {tokenizer.eos_token!r} (id {EOS_ID})；pad = {tokenizer.pad_token!r} (id {PAD_ID})")

# %% [markdown]
# ## 第 1 步　从生成结果到 `completion_mask`
#
# 一次采样（rollout）返回的是一个矩形的 `completion_ids`，形状 `[B, T]`。每一行的有效长度不同：
#
# - 有的回答写完了，在某个位置生成了 EOS；采样引擎可能没有立刻停下，EOS 后面还跟着一些词元；
# - 有的回答写到 `max_new_tokens` 还没结束，整行都没有 EOS；
# - 行与行长度不同，短的行要填充（padding）。采样引擎通常同时给出一个 `pad_mask`（1 = 真实生成的词元，0 = 填充）。
#
# 损失只应该覆盖“模型真正说出、并且在回答结束之前”的词元。规则：
#
# 1. 在 `pad_mask` 为真的位置里找**第一个** EOS；
# 2. 保留从开头到这个 EOS 的位置，**包括 EOS 本身**——“在这里停下”也是模型做出的决定，必须得到奖励或惩罚，
#    否则模型学不会在合适的时候结束；
# 3. 一行里（在 `pad_mask` 内）没有 EOS 时，保留整个 `pad_mask`；
# 4. 结果始终与 `pad_mask` 取交集：填充位永远不进入损失。**填充位上出现的 EOS 不算数**——很多分词器把 pad 设成 eos，
#    左侧填充时填充位全是 EOS，如果把它们当成“第一个 EOS”，整行回答都会被掩掉。
#
# ### TODO 1　实现 `completion_mask_from_eos(completion_ids, eos_token_id, pad_mask=None)`
#
# - `completion_ids`：整数张量，形状 `[B, T]`；
# - `eos_token_id`：Python `int`（`bool` 不接受）；
# - `pad_mask`：`None`（表示全部有效）或形状同为 `[B, T]` 的布尔张量 / 只含 0 和 1 的任意实数 dtype 的张量
#   （整数或浮点，结果与布尔掩码相同；见约定卡 C1）；
# - 返回 `[B, T]` 的布尔张量。
#
# 形状或 dtype 不对时抛出带中文说明的 `ValueError`。提示：`cumsum` 可以数出“到目前为止见过几个 EOS”。

# %% nbgrader={"solution": true, "grade_id": "completion_mask_from_eos"}
#@save
import torch


def completion_mask_from_eos(completion_ids, eos_token_id, pad_mask=None):
    """Boolean [B, T] mask: real tokens up to and including the first real EOS of each row."""
    ### BEGIN SOLUTION
    if not isinstance(completion_ids, torch.Tensor) or completion_ids.dim() != 2:
        raise ValueError("completion_ids 必须是形状为 [B, T] 的二维张量")
    if completion_ids.is_floating_point() or completion_ids.is_complex() or completion_ids.dtype == torch.bool:
        raise ValueError(f"completion_ids 必须是整数张量，收到 {completion_ids.dtype}")
    if isinstance(eos_token_id, bool) or not isinstance(eos_token_id, int):
        raise ValueError(f"eos_token_id 必须是 int，收到 {type(eos_token_id).__name__}")
    if pad_mask is None:
        pad_mask = torch.ones_like(completion_ids, dtype=torch.bool)  # [B, T]
    else:
        if not isinstance(pad_mask, torch.Tensor) or tuple(pad_mask.shape) != tuple(completion_ids.shape):
            raise ValueError(f"pad_mask 必须是与 completion_ids 同形状 {tuple(completion_ids.shape)} 的张量")
        if pad_mask.is_complex():
            raise ValueError(f"pad_mask 必须是布尔张量或只含 0/1 的实数张量，收到 {pad_mask.dtype}")
        if pad_mask.dtype != torch.bool:
            if not ((pad_mask == 0) | (pad_mask == 1)).all():
                raise ValueError("pad_mask 为数值张量时只能含 0 和 1（约定卡 C1）")
            pad_mask = pad_mask != 0
    pad_mask = pad_mask.to(completion_ids.device)
    is_eos = (completion_ids == eos_token_id) & pad_mask  # [B, T] only EOS the model really generated
    eos_seen_before = torch.cumsum(is_eos.long(), dim=1) - is_eos.long()  # [B, T] EOS strictly before t
    return (eos_seen_before == 0) & pad_mask  # [B, T]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_completion_mask_from_eos_visible", "points": 3}
"""检查：保留到第一个 EOS（含）、无 EOS 保留整个 pad_mask、填充位上的 EOS 不算数、dtype 与输入契约（可见测试）。"""
_E = 9
_ids = torch.tensor([[5, 6, _E, 7, 8],    # EOS at position 2: keep 0..2
                     [5, 6, 7, 8, 4],     # no EOS: keep the whole row
                     [_E, 5, _E, 3, 3]])  # EOS first: keep only position 0
_mask = completion_mask_from_eos(_ids, _E)
assert _mask.dtype == torch.bool, f"返回值应为布尔张量，实际 {_mask.dtype}"
assert_close(_mask.long(), [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], what="无 pad_mask 时的掩码")

_pad = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0], [0, 0, 1, 1, 1]])  # last row is left-padded
_ids = torch.tensor([[5, 6, 7, 8, _E],   # the only EOS is padding: does not count
                     [5, _E, 7, 0, 0],
                     [_E, _E, 4, 5, _E]])  # padding EOS on the left, the real EOS at the end
_mask = completion_mask_from_eos(_ids, _E, _pad)
assert_close(_mask.long(), [[1, 1, 1, 1, 0], [1, 1, 0, 0, 0], [0, 0, 1, 1, 1]], what="带 pad_mask 的掩码")
assert_close(completion_mask_from_eos(_ids, _E, _pad.bool()).long(), _mask.long(), what="布尔 pad_mask 的掩码")

expect_value_error(lambda: completion_mask_from_eos(_ids[0], _E), "completion_ids 不是二维")
expect_value_error(lambda: completion_mask_from_eos(_ids.float(), _E), "completion_ids 不是整数")
expect_value_error(lambda: completion_mask_from_eos(_ids, _E, _pad[:, :4]), "pad_mask 形状不一致")
assert_close(completion_mask_from_eos(_ids, _E, _pad.float()).long(), _mask.long(),
             what="0/1 浮点 pad_mask 的掩码（应与布尔掩码相同，约定卡 C1）")
expect_value_error(lambda: completion_mask_from_eos(_ids, _E, _pad.float() * 0.5), "pad_mask 只含 0 和 1（0.5）")
expect_value_error(lambda: completion_mask_from_eos(_ids, "9"), "eos_token_id 不是 int")
print("可见测试通过")
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb05_logprobs_masks", "test_completion_mask_from_eos_visible", globals())
### END HIDDEN TESTS

# %% [markdown]
# ### 在真实分词器的输出上看掩码
#
# 下面用微型检查点的分词器拼出三条“生成结果”，右侧用 `<|endoftext|>` 填充：
# 第一条正常结束；第二条在 `<|im_end|>` 之后还继续生成了一段（采样引擎没有及时停下）；第三条写到长度上限也没有结束。

# %%
fake_generations = [
    "4<|im_end|>",
    "The answer is 4.<|im_end|>\n<|im_start|>user\nWhat",
    "I do not know, maybe",
]
encoded = tokenizer(fake_generations, add_special_tokens=False, padding=True, return_tensors="pt")
completion_ids = encoded["input_ids"]  # [B, T]
rollout_pad_mask = encoded["attention_mask"]  # [B, T] 1 = generated, 0 = padding
completion_mask = completion_mask_from_eos(completion_ids, EOS_ID, rollout_pad_mask)  # [B, T]
for row in range(completion_ids.shape[0]):
    pieces = []
    for token_id, pad, keep in zip(completion_ids[row].tolist(), rollout_pad_mask[row].tolist(), completion_mask[row].tolist()):
        text = tokenizer.decode([token_id]).replace("\n", "\\n")
        pieces.append(f"{text}[{'✓' if keep else ('·' if pad else ' ')}]")
    print(f"第 {row} 行：", " ".join(pieces))
print("图例：✓ 进入损失；· 真实生成但在第一个 EOS 之后；空白为填充")

# %% [markdown]
# 再看“填充位上的 EOS”：很多模型没有专门的 pad 词元，就用 EOS 填充。如果采样结果是**左侧填充**的，
# 填充位全是 EOS；只在 `pad_mask` 之内找 EOS，这一行才不会被整行掩掉。

# %%
left_padded_ids = torch.tensor([[EOS_ID, EOS_ID] + completion_ids[0, :2].tolist()])  # [1, 4] "4<|im_end|>" after 2 pads
left_pad_mask = torch.tensor([[0, 0, 1, 1]])  # [1, 4]
print("completion_ids       ", left_padded_ids.tolist())
print("pad_mask             ", left_pad_mask.tolist())
print("completion_mask      ", completion_mask_from_eos(left_padded_ids, EOS_ID, left_pad_mask).long().tolist())
padding_eos_counted = (torch.cumsum((left_padded_ids == EOS_ID).long(), 1) - (left_padded_ids == EOS_ID).long() == 0) & left_pad_mask.bool()
print("若把填充位 EOS 也算上", padding_eos_counted.long().tolist(), "← 整条回答都被丢掉了")

# %% [markdown]
# ## 第 2 步　提示和回答在同一行里怎样对齐
#
# 计算对数概率时，模型看到的是“提示 + 回答”拼成的完整一行。课程运行时的 `build_response_batch` 通过聊天模板把每对
# (提示, 回答) 渲染成 ChatML，分词、右侧填充，并给出三个 `[B, T]` 张量：
#
# - `input_ids`：词元；
# - `attention_mask`：1 = 真实词元，0 = 填充（模型据此忽略填充）；
# - `response_mask`：只在**回答**的词元上为真，包括回答末尾的 `<|im_end|>`；提示、模板附加的换行、填充都为假。
#
# 下面逐个位置打印第一行。

# %%
PROMPTS = ["Return only the integer result of 2 + 2.", "Return only the integer result of 3 * 3."]
RESPONSES = ["4", "The answer is 9."]
batch = build_response_batch(tokenizer, PROMPTS, RESPONSES, max_length=64)
input_ids = batch["input_ids"]  # [B, T]
attention_mask = batch["attention_mask"]  # [B, T]
response_mask = batch["response_mask"]  # [B, T]
print("input_ids 形状", tuple(input_ids.shape))
row = 0
print(f"{'t':>3} {'id':>4} {'token':<16} {'attention':>9} {'response':>8}")
for t in range(input_ids.shape[1]):
    text = tokenizer.decode([int(input_ids[row, t])]).replace("\n", "\\n")
    print(f"{t:>3} {int(input_ids[row, t]):>4} {text!r:<16} {int(attention_mask[row, t]):>9} {int(response_mask[row, t]):>8}")

# %% [markdown]
# 注意表尾：`<|im_end|>` 属于回答（`response=1`），它后面的 `\n` 是模板加的文字（`attention=1` 但 `response=0`），
# 再往后是填充（两者都是 0）。第二行的回答更长，所以第一行被填充到了同样的长度 `T`。

# %% [markdown]
# ## 第 3 步　为什么要错一位
#
# 因果语言模型在位置 `t` 输出的 logits 是**下一个**词元的分布：`logits[:, t]` 给出 `p(input_ids[:, t+1] | input_ids[:, :t+1])`。
# 所以：
#
# - 要得到词元 `input_ids[:, t+1]` 的对数概率，取 `log_softmax(logits[:, t])` 在 `input_ids[:, t+1]` 处的值；
# - 整行有 `T` 个位置，但只有 `T−1` 个“预测—答案”配对：最后一个位置的 logits 没有答案可比，第一个词元没有前文来预测它；
# - 掩码也要跟着错一位：第 `t` 个配对是否属于回答，看的是 `response_mask[:, t+1]`。
#
# 先用实验确认“位置 `t` 只看得到 `t` 及以前”：改掉某个回答词元，它**之前**所有位置的 logits 一点都不变。

# %%
with torch.no_grad():
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits  # [B, T, V]
    changed = input_ids.clone()  # [B, T]
    position = int(response_mask[1].nonzero()[2])  # the third response token of row 1
    changed[1, position] = (changed[1, position] + 1) % model.config.vocab_size
    changed_logits = model(input_ids=changed, attention_mask=attention_mask).logits  # [B, T, V]
difference = (changed_logits[1] - logits[1]).abs().amax(dim=-1)  # [T]
print("logits 形状", tuple(logits.shape))
print(f"改动位置 t = {position}")
print(f"位置 0..{position - 1} 的 logits 最大变化：{difference[:position].max().item():.3g}")
print(f"位置 {position}..{position + 2} 的 logits 最大变化：{[round(v, 4) for v in difference[position:position + 3].tolist()]}")

# %% [markdown]
# 位置 `t` 之前的 logits 完全不受影响，从 `t` 开始才变化——所以 `logits[:, t−1]` 对 `input_ids[:, t]` 的预测是“没有偷看答案”的，
# 这正是错一位取值的依据。
#
# ### TODO 2　实现 `shifted_token_logps(logits, input_ids)`
#
# - `logits`：浮点张量 `[B, T, V]`；`input_ids`：整数张量 `[B, T]`，取值在 `[0, V)`；要求 `T >= 2`；
# - 返回 `[B, T−1]`，第 `t` 列是 `log p(input_ids[:, t+1] | 前文)`，dtype 与 `logits` 相同，并且能对 `logits` 反向传播；
# - 输入不合法（维度、dtype、形状不匹配、`T < 2`、词元越界）时抛出 `ValueError`。
#
# 先写最直接的版本：整张 `log_softmax` 再 `gather`。本课最后会测量这样写要多花多少内存。

# %% nbgrader={"solution": true, "grade_id": "shifted_token_logps"}
#@save
import torch


def shifted_token_logps(logits, input_ids):
    """[B, T-1] log-probs of input_ids[:, 1:] under the next-token distributions logits[:, :-1]."""
    ### BEGIN SOLUTION
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or not logits.is_floating_point():
        raise ValueError("logits 必须是形状为 [B, T, V] 的浮点张量")
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        raise ValueError("input_ids 必须是形状为 [B, T] 的二维张量")
    if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dtype == torch.bool:
        raise ValueError(f"input_ids 必须是整数张量，收到 {input_ids.dtype}")
    if tuple(input_ids.shape) != tuple(logits.shape[:2]):
        raise ValueError(f"input_ids 形状 {tuple(input_ids.shape)} 必须等于 logits 的前两维 {tuple(logits.shape[:2])}")
    if logits.shape[1] < 2:
        raise ValueError("T 必须至少为 2：错一位之后才有预测—答案配对")
    if input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= logits.shape[-1]):
        raise ValueError(f"input_ids 的取值必须在 [0, V={logits.shape[-1]}) 内")
    next_token_logps = torch.log_softmax(logits[:, :-1, :], dim=-1)  # [B, T-1, V]
    targets = input_ids[:, 1:].long().unsqueeze(-1)  # [B, T-1, 1]
    return next_token_logps.gather(-1, targets).squeeze(-1)  # [B, T-1]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_shifted_token_logps_visible", "points": 3}
"""检查：错一位取值与课程运行时（selective_log_softmax、response_sequence_logps）一致，形状与输入契约（可见测试）。"""
_token_logps = shifted_token_logps(logits, input_ids)
assert tuple(_token_logps.shape) == (input_ids.shape[0], input_ids.shape[1] - 1), \
    f"形状应为 [B, T-1] = {(input_ids.shape[0], input_ids.shape[1] - 1)}，实际 {tuple(_token_logps.shape)}"
assert_close(_token_logps, selective_log_softmax(logits[:, :-1], input_ids[:, 1:]), atol=1e-5,
             what="与 selective_log_softmax(logits[:, :-1], input_ids[:, 1:]) 对照")
with torch.no_grad():
    _, _runtime_token_logps = response_sequence_logps(model, batch, normalize=True)  # zeros outside the response
assert_close(_token_logps.masked_fill(~response_mask[:, 1:], 0.0), _runtime_token_logps, atol=1e-5,
             what="回答位置上与 response_sequence_logps 对照")
_small = torch.tensor([[[0.0, 0.0], [1.0, 0.0], [5.0, 5.0]]])  # [1, 3, 2]
assert_close(shifted_token_logps(_small, torch.tensor([[0, 1, 0]])),
             [[-0.6931471805599453, -0.31326168751822286]], what="手算的小例子")
expect_value_error(lambda: shifted_token_logps(logits, input_ids[:, :-1]), "形状不匹配")
expect_value_error(lambda: shifted_token_logps(logits[:, :1], input_ids[:, :1]), "T < 2")
expect_value_error(lambda: shifted_token_logps(logits, input_ids.float()), "input_ids 不是整数")
print("可见测试通过")
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb05_logprobs_masks", "test_shifted_token_logps_visible", globals())
### END HIDDEN TESTS

# %% [markdown]
# ## 第 4 步　序列对数概率与词元对数概率
#
# 有了 `[B, T−1]` 的词元对数概率，再乘上错一位的回答掩码 `response_mask[:, 1:]`，就得到只属于回答的部分。把它们归约成每行一个数有两种常见方式：
#
# - **求和**：`log π(整条回答 | 提示)`，整条回答的真实对数概率。越长的回答，求和越负——长度本身就会左右它；
# - **求均值**：每个回答词元的平均对数概率。它和长度脱钩，GSPO 的序列级概率比、第 6 课实验里的序列概率比都用它。
#
# GRPO 的逐词元概率比则直接用每个词元自己的对数概率，不先归约。下面用你的函数重新计算，并和运行时的两种归约对照。

# %%
token_mask = response_mask[:, 1:]  # [B, T-1] pair t belongs to the response iff token t+1 does
with torch.no_grad():
    my_token_logps = shifted_token_logps(logits, input_ids).masked_fill(~token_mask, 0.0)  # [B, T-1]
    runtime_mean, _ = response_sequence_logps(model, batch, normalize=True)  # [B]
    runtime_sum, _ = response_sequence_logps(model, batch, normalize=False)  # [B]
counts = token_mask.sum(dim=1)  # [B]
for b, response in enumerate(RESPONSES):
    values = my_token_logps[b][token_mask[b]]
    print(f"回答 {response!r}: {int(counts[b])} 个回答词元，逐词元 {[round(v, 2) for v in values.tolist()]}")
    print(f"    求和 {values.sum().item():8.3f}（运行时 {runtime_sum[b].item():8.3f}）"
          f"   均值 {values.mean().item():7.3f}（运行时 {runtime_mean[b].item():7.3f}）")
print(f"参照：均匀分布下每个词元的对数概率 = −log V = {-torch.log(torch.tensor(float(model.config.vocab_size))).item():.3f}")

# %% [markdown]
# 随机权重的模型对每个词元都差不多“一无所知”（每个词元的对数概率都在均匀分布的 `−log V` 附近），
# 所以均值两行接近，求和却和回答长度几乎成正比。训练好的模型也有同样的结构性偏差：用求和做序列概率比时，长回答的概率比会被放大或压缩得更厉害。

# %% [markdown]
# ## 第 5 步　朴素 `log_softmax` 与选择性 `log_softmax` 的内存
#
# 我们只需要每个位置**一个**词元的对数概率，但 `log_softmax(logits)` 会为整个词表算出一份与 logits 同样大的新张量 `[B, T−1, V]`。
# Qwen2.5 的词表有 151,936 个词元，这份临时张量往往比模型本身的激活还大。选择性写法只取目标 logit，再减去每个位置的 `logsumexp`：
#
# `log p(y_t) = logits[t, y_t] − logsumexp(logits[t, :])`
#
# 课程运行时的 `selective_log_softmax` 分块计算 `logsumexp`：每次处理 `rows_per_chunk` 个批次行、`tokens_per_chunk`（默认 16）个位置，
# 最大的临时张量只有 `[rows_per_chunk, tokens_per_chunk, V]`。TRL 1.16.0 的同名函数（`trl/trainer/utils.py`）有两条路径：
# 装了 Triton 且 logits 在 CUDA / XPU 上（dtype 为 fp16、bf16 或 fp32）时，它调用融合内核 `_fused_logprob_entropy`，
# 不再逐行循环；否则（例如本课的 CPU）才按批次行循环，float32/float64 时每次对一整行 `[T, V]` 求 `logsumexp`，
# bf16/fp16 时逐行做 `log_softmax`。
#
# **怎样测**：CPU 上没有 `torch.cuda.max_memory_allocated()` 这样的计数器，`tracemalloc` 也看不到 torch 的分配。
# 我们改用操作系统记录的**进程峰值常驻内存**：在一个**新的子进程**里造好 logits，把峰值计数清零，执行一种写法，
# 峰值减去执行前的常驻内存，就是这种写法额外占用的内存；清零后再测下一种写法。
#
# - Linux：向 `/proc/self/clear_refs` 写入 `5` 把峰值（`/proc/self/status` 里的 `VmHWM`）重置为当前常驻内存（`VmRSS`），测完再读 `VmHWM`；
# - 其他系统（macOS）没有重置的办法：退而使用 `resource.getrusage(...).ru_maxrss` 的增量，并且每种写法各用一个新的子进程；
# - glibc 的 `malloc` 会把释放掉的中等大小内存块留在进程里复用，这部分不会从常驻内存里“消失”。子进程设置
#   `MALLOC_MMAP_THRESHOLD_=65536`，让 64 KiB 以上的块都直接向操作系统申请、释放时立即归还，峰值才如实反映同一时刻存在的张量。
#
# 形状取 `B=8, T=32, V=151,936`（Qwen2.5 的词表），logits 本身约 148 MiB。

# %% nbgrader={"locked": true, "grade_id": "demo_memory_probe"}
MEMORY_PROBE = r"""
import json, resource, sys
import torch
from tools.post_training_runtime import selective_log_softmax
torch.set_num_threads(1)
B, T, V = (int(value) for value in sys.argv[1:4])
modes = sys.argv[4:]
generator = torch.Generator().manual_seed(0)
logits = torch.randn(B, T, V, generator=generator)            # [B, T, V]
input_ids = torch.randint(0, V, (B, T), generator=generator)  # [B, T]
targets = input_ids[:, 1:]                                     # [B, T-1]
RU_UNIT = 1 if sys.platform == "darwin" else 1024              # ru_maxrss: bytes on macOS, KiB on Linux

def proc_status(key):
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith(key + ":"))

def start_measurement():
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")                                  # reset VmHWM to the current VmRSS
        return "VmHWM", proc_status("VmRSS")
    except OSError:
        return "ru_maxrss", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * RU_UNIT

def peak_now(method):
    if method == "VmHWM":
        return proc_status("VmHWM")
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * RU_UNIT

def run(mode):
    if mode == "naive_sliced":      # MiniMind / most tutorials: log_softmax of the shifted view
        return torch.log_softmax(logits[:, :-1, :], dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    if mode == "naive_full":        # log_softmax of the whole (contiguous) logits, then shift
        return torch.log_softmax(logits, dim=-1)[:, :-1, :].gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    rows = {"selective_4rows": 4, "selective_1row": 1}[mode]
    return selective_log_softmax(logits[:, :-1, :], targets, rows_per_chunk=rows)

with torch.no_grad():
    selective_log_softmax(logits[:1, :2], input_ids[:1, 1:3])  # load the kernels before measuring
    torch.log_softmax(logits[:1, :2], dim=-1)
    for mode in modes:
        method, before = start_measurement()
        out = run(mode)
        extra = peak_now(method) - before
        print(json.dumps({"mode": mode, "method": method, "extra_peak_bytes": extra, "checksum": float(out.double().sum())}))
        del out
        if method != "VmHWM":
            break                   # a non-resettable peak: every further mode needs a fresh process
"""
MEMORY_SHAPE = (8, 32, 151936)
MEMORY_MODES = ["naive_sliced", "naive_full", "selective_4rows", "selective_1row"]
course_root = Path(tools.__file__).resolve().parent.parent
probe_env = dict(os.environ, OMP_NUM_THREADS="1", MALLOC_MMAP_THRESHOLD_="65536",
                 PYTHONPATH=os.pathsep.join(filter(None, [str(course_root), os.environ.get("PYTHONPATH")])))


def run_memory_probe(modes):
    """Run MEMORY_PROBE in a fresh interpreter; return its records for the modes it measured."""
    done = subprocess.run([sys.executable, "-c", MEMORY_PROBE, *map(str, MEMORY_SHAPE), *modes], cwd=course_root,
                          env=probe_env, capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        raise RuntimeError(f"内存测量子进程失败：\n{done.stderr[-2000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


memory = {}
if sys.platform.startswith("win"):
    print("Windows 没有 resource 模块和 /proc，这里跳过实测；请在 Linux 或 macOS 上运行本单元格。")
else:
    pending = list(MEMORY_MODES)
    while pending:
        records = run_memory_probe(pending)
        for record in records:
            memory[record["mode"]] = record
        pending = [mode for mode in pending if mode not in memory]

B_, T_, V_ = MEMORY_SHAPE
one_copy = B_ * (T_ - 1) * V_ * 4  # bytes of one float32 [B, T-1, V] tensor
one_row = (T_ - 1) * V_ * 4  # bytes of one float32 [T-1, V] row
print(f"logits [B, T, V]：{B_ * T_ * V_ * 4 / 2**20:.1f} MiB；一份 [B, T-1, V]：{one_copy / 2**20:.1f} MiB；一行 [T-1, V]：{one_row / 2**20:.1f} MiB")
for mode, record in memory.items():
    extra = record["extra_peak_bytes"]
    print(f"{mode:<16} 额外峰值 {extra / 2**20:7.1f} MiB = {extra / one_copy:5.2f} 份 [B, T-1, V] = {extra / one_row:5.1f} 行 [T-1, V]"
          f"（{record['method']}）")
tokens_per_chunk = 16  # the default of tools.post_training_runtime.selective_log_softmax
for mode, rows in (("selective_1row", 1), ("selective_4rows", 4)):
    predicted = rows * min(tokens_per_chunk, T_ - 1) / (T_ - 1)  # rows of [T-1, V] in one [rows, 16, V] block
    measured = memory[mode]["extra_peak_bytes"] / one_row if mode in memory else float("nan")
    print(f"{mode:<16} 预测：一块 [{rows}, {tokens_per_chunk}, V] = {rows} × {tokens_per_chunk}/{T_ - 1} = {predicted:.2f} 行；实测 {measured:.2f} 行")
if memory:
    print("四种写法结果的总和（应一致）：", [round(record["checksum"], 3) for record in memory.values()])
    print(f"朴素（切片） / 逐行选择性 = {memory['naive_sliced']['extra_peak_bytes'] / max(memory['selective_1row']['extra_peak_bytes'], 1):.1f} 倍")
    # Loose sanity check (the allocator adds noise): the selective forms stay far below one [B, T-1, V] copy.
    assert memory["selective_1row"]["extra_peak_bytes"] < 0.5 * one_copy
    assert memory["naive_sliced"]["extra_peak_bytes"] > memory["selective_4rows"]["extra_peak_bytes"]

# %% [markdown]
# 读数的含义：
#
# - `naive_sliced`（MiniMind 的写法）额外占用约**两份** `[B, T−1, V]`：`logits[:, :-1]` 是不连续的切片视图，
#   `log_softmax` 先把它复制成连续张量，再写出同样大的输出。
# - `naive_full` 先对整个连续的 logits 做 `log_softmax` 再切片，省掉了复制，但仍要一整份输出。
# - 选择性写法的临时张量来自 `logsumexp`（它内部要算一份 `exp(logits − max)`），大小等于**每次处理的那一块**。
#   这一块是 `[rows_per_chunk, 16, V]`，不是 `rows_per_chunk` 整行：本例 $T-1 = 31$ 个位置被切成 16 + 15 两块，
#   所以 `selective_1row` 约 $16/31 \approx 0.5$ 行 `[T−1, V]`，`selective_4rows` 约 $4 \times 16/31 \approx 2.1$ 行——
#   上面打印的“预测”与“实测”两列就是这个算术。若只按批次行分块（TRL 在 CPU 上、或没有 Triton 时的写法），才是一行与四行；
#   TRL 在 GPU 上走融合内核，这里的 CPU 测量不说明它的内存。
#   块越大，循环次数越少、内存越多。
# - 四种写法的结果相同（总和一致），省下的只是内存。
# - 训练时还有反向传播：朴素写法的 `[B, T−1, V]` 输出要保留到反向传播结束，这份内存在整个前向—反向期间都占着。
#
# 这些数字是在运行本笔记的机器上测出来的，换一台机器或另一种内存分配器会略有差别；正式的速度与内存对比放在仓库的 `benchmarks/` 里。

# %% [markdown] nbgrader={"solution": true, "grade": true, "grade_id": "explain_eos_in_mask", "points": 2}
# **思考题（人工评分）**：`completion_mask` 为什么要**包含**第一个 EOS？如果把 EOS 排除在掩码之外，训练一段时间后你预计模型的回答长度会怎样变化？
#
# ### BEGIN SOLUTION
# **参考答案与解析**
#
# - EOS 是模型在“何时停止”上的决定，和其他词元一样由策略采样得到。它的对数概率进入损失，
#   高优势回答的“在这里结束”才会被强化，低优势回答的“在这里结束”才会被削弱。
# - 排除 EOS 后，停止这个动作永远得不到梯度：模型无从学习在合适的位置结束。以“只输出整数”为例，
#   正确的短回答 `4<|im_end|>` 的结束符不被强化，模型容易在答案后继续输出（回答变长、出现多余文本），
#   直到被 `max_new_tokens` 截断——而被截断、没有 EOS 的回答在格式奖励下又会被判失败。
# - 解析要点回顾：掩码保留 `pad_mask` 内第一个 EOS 及之前的词元，填充位上的 EOS 不算（第 1 步）；
#   `logits[:, t]` 预测 `input_ids[:, t+1]`，所以取值和掩码都错一位（第 2、3 步）；求和与均值两种序列归约及其长度偏差（第 4 步）；
#   朴素 `log_softmax` 额外占用一到两份 `[B, T−1, V]`，选择性写法只需一块 `[rows_per_chunk, 16, V]`（第 5 步）。
# ### END SOLUTION

# %%
print(f"本笔记从第一个代码单元运行到这里用了 {time.perf_counter() - _lesson_started:.1f} 秒（本机此刻的负载下实测，不含内核启动）")

# %% [markdown]
# ---
#
# # 🛑 STOP HERE 🛑
#
# 到这里本课就完成了。提交前请 Kernel → Restart & Run All，确认所有测试单元格都通过；上面的思考题由老师人工评分。
