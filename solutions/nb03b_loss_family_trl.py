# ---
# jupyter:
#   kernelspec: {display_name: Python 3, language: python, name: python3}
#   course: {profile: BASE-CPU}
# ---

# %% [markdown]
# # 第 3b 课　损失家族、GSPO 与 TRL 一致性核对
#
# ## 导读
#
# 第 3a 课写了 MiniMind 的两个策略损失 `grpo_policy_loss` 与 `cispo_policy_loss`。本课回答两个问题：
#
# 1. **“损失家族”到底差在哪里？** TRL 1.16 的 `GRPOTrainer` 用 `loss_type` 区分 `grpo`、`bnpo`、`dr_grpo`、`dapo`、
#    `cispo`、`sapo`、`luspo`、`vespo`。`grpo`、`bnpo`、`dr_grpo`、`dapo` 的逐词元损失相同（都是裁剪目标
#    `−min(r·A, clip(r)·A)`），差别只在**归约**：把 `[B*G, T]` 的逐词元损失变成一个标量时，每个词元拿到多大的权重。
#    `cispo` 不同：它的逐词元损失是另一个目标 `−sg(min(r, ε_max))·A·log π`，梯度在裁剪区外也不消失（第 3a 课的主题；
#    TRL 1.16.0 `GRPOTrainer._compute_loss` 的 `loss_type == "cispo"` 分支），归约与 `dapo` 相同。
#    你会写一个统一的归约器，并用一条 3 词元的回答和一条 30 词元的回答算出每种归约的**长度偏置**；
#    再看 DAPO 的 clip-higher 为什么能缓解熵塌缩、GSPO 的**序列级**概率比、概率比从哪里偏离 1，
#    以及 TRL 另外三种 `loss_type` 和 `delta`、`use_bias_correction_kl` 两个选项。
# 2. **和框架对得上吗？** 最后一节把你写的函数交给 `tools/trl_conformance.py`，它在概率比确实越过裁剪边界的输入上
#    逐个 `loss_type` 调用 TRL 1.16.0 真实的 `GRPOTrainer._compute_loss`，核对数值与梯度；优势则直接执行 TRL
#    `_generate_and_score_completions` 里计算优势的那段源码。
#
# 本课要你实现的函数（名字和签名固定，自动评分与核对都依赖它们）：
#
# | TODO | 函数 | 作用 |
# | --- | --- | --- |
# | 1 | `reduce_per_token_loss(per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None)` | 损失家族的统一归约器（标量） |
# | 2 | `importance_ratio(policy_logps, old_logps, completion_mask, importance_sampling_level="token")` | 词元级或序列级（GSPO）概率比 |
# | 3 | `per_token_policy_loss(policy_logps, old_logps, advantages, completion_mask, loss_type="grpo", epsilon_low=0.2, epsilon_high=0.28, importance_sampling_level="token", beta=0.0, ref_logps=None)` | clip-higher / CISPO / GSPO 的逐词元损失 `[B*G, T]` |
#
# 另外还有 1 道数值检查题（Q9，损失家族的长度偏置）。
#
# 完成标准：每个 TODO 下面的可见测试通过；提交后隐藏测试用随机输入、float32/float64、变长掩码、
# 被掩码位置上的极端数值和梯度再核对一遍。
#
# 本课用到的术语：**词元**（token）；**候选 / 回答**（completion）；**参考策略**（reference，冻结的 SFT 模型）。

# %% [markdown]
# ## 运行环境
#
# - 本课主体使用 **BASE-CPU** 配置（`torch`、`matplotlib`），不需要 GPU，也不下载模型。
# - 最后一节“框架一致性核对”需要 **PT-CPU** 配置（额外安装 `trl==1.16.0`）。没有 TRL 时，这一节报告
#   `{"status": "skipped", ...}` 并说明原因——这不算失败，也不影响评分。
# - 运行时间：`make bench` 在一台**空闲**的 2 核机器上测本课（不含内核启动，大部分是导入 TRL）；机器忙时可能
#   慢几倍。本课最后一个代码单元打印**这一次**从头运行到那里的实测秒数，以它为准。
# - 笔记本最上方的启动单元会打印当前环境的检查表；如果表里有红色项，先按提示修好再往下做。
# - 掩码、`beta`、ε、名称等约定见课程的[约定卡](../../docs/CONVENTIONS.md)（C1–C6）与术语表。

# %% [markdown]
# ## 前置阅读
#
# - 第 3a 课（`nb03a_cispo_trace_lab`）：本课从 `tools.lessons.nb03a_cispo_trace_lab` 导入那一课评分过的
#   `grpo_policy_loss`、`cispo_policy_loss` 和共享部件 `check_policy_inputs`、`completion_bool_mask`。
# - 论文（可选）：DAPO（arXiv 2503.14476：clip-higher 与词元级归约）；Dr. GRPO（arXiv 2503.20783：用常数
#   归约消除长度偏置）；GSPO（arXiv 2507.18071：序列级概率比）。
# - TRL 文档中 `GRPOConfig` 的 `loss_type`、`epsilon`、`epsilon_high`、`delta`、`importance_sampling_level`、`beta`、
#   `use_bias_correction_kl`、`scale_rewards`、`multi_objective_aggregation` 参数说明。
# - 课程约定卡（`docs/CONVENTIONS.md`）：C1 掩码可以是 bool 或 0/1；C3 被掩码的位置不影响损失和梯度
#   （先掩码再 exp）；C5 TRL 家族里全被掩码的回答贡献 0（分母 `clamp(min=1)`）。

# %% [markdown]
# ## 第 1 步　符号与共享部件
#
# 符号与第 3a 课相同：`B` 个提示、每个 `G = num_generations` 条回答（平铺在第 0 维，同一提示的回答连续），
# 回答最长 `T` 个词元；`policy_logps` / `old_logps` / `ref_logps` 与 `completion_mask` 都是 `[B*G, T]`，`advantages` 是 `[B*G]`。
# 下面的**只读**单元导入前几课评分过的函数（不另抄一份），并准备画图的小工具。

# %% nbgrader={"locked": true, "grade_id": "shared_helpers"}
#@save
import math

import torch

from tools.lessons.nb01_group_advantages import group_relative_advantages
from tools.lessons.nb02_grpo_objective import token_kl_penalty
from tools.lessons.nb03a_cispo_trace_lab import check_policy_inputs, cispo_policy_loss, completion_bool_mask, grpo_policy_loss
from tools.loss_types import CLIPPED_LOSS_TYPES, LOSS_TYPES  # the TRL loss types the graded functions cover

# %% nbgrader={"locked": true, "grade_id": "display_helpers"}
import json
import time

import matplotlib.pyplot as plt
from tools.notebook_runtime import show_figure  # PNG in the notebook whatever the backend

LESSON_STARTED = time.perf_counter()  # the last code cell prints how long this run took
torch.set_printoptions(precision=4, sci_mode=False)
plt.rcParams["axes.unicode_minus"] = False


print("共享部件已就绪（来自第 1、2、3A 课）：group_relative_advantages, token_kl_penalty, check_policy_inputs,"
      " grpo_policy_loss, cispo_policy_loss；LOSS_TYPES =", LOSS_TYPES)

# %% [markdown]
# ## 第 2 步　损失家族 = 同一个逐词元损失 + 不同的归约（TODO 1）
#
# 把 `[B*G, T]` 的 `per_token_loss` 变成标量，TRL 的 `loss_type` 给了四种归约（记 `m` 为掩码，`B*G` 为本地批的回答条数）：
#
# | `loss_type` | 归约 | 每个有效词元的权重 |
# | --- | --- | --- |
# | `grpo` | 回答内词元均值，再对回答求均值 | `1 / (B*G · n_i)`：与本回答的长度 `n_i` 成反比 |
# | `bnpo` | 本地批内所有有效词元的均值：`Σ m·ℓ / Σ m` | `1 / Σ m`：本地批内一视同仁 |
# | `dr_grpo` | `Σ m·ℓ / (B*G · max_completion_length)` | 常数 `1 / (B*G · L_max)`（Dr. GRPO） |
# | `dapo` | `Σ m·ℓ / num_items_in_batch`：全局批（所有进程、整个梯度累积窗口）的词元均值 | `1 / N_global`（DAPO） |
#
# TRL 里 `loss_type="cispo"` 的**归约与 `dapo` 相同**（除以 `num_items_in_batch`），这一点和 MiniMind 的
# `cispo_policy_loss`（按 `grpo` 归约）不同——最后的核对会用到。你的归约器也接受 `"cispo"`，按 `dapo` 处理。
# 全被掩码掉的回答贡献 0（约定 C5，TRL 的写法：分母 `clamp(min=1)`）。
#
# 输入契约（违反时抛出中文 `ValueError`）：
# - `per_token_loss` 是二维张量，`completion_mask` 形状与它相同、取值是 bool 或 0/1（用 `completion_bool_mask` 检查并转成 bool）；
# - `loss_type` 是 `"grpo"`、`"bnpo"`、`"dr_grpo"`、`"dapo"`、`"cispo"` 之一；
# - `dr_grpo` 需要正整数 `max_completion_length`，且不小于 `T`（回答不可能比上限还长）；
# - `dapo` / `cispo` 需要 `num_items_in_batch`（数字或 0 维张量，`>= 0`），分母按 `max(num_items_in_batch, 1)` 计。
#
# 提示：用 `torch.where(valid, per_token_loss, 0.0)` 而不是乘掩码把 padding 挡掉：这样 padding 上即使是 `inf`
# 也不会变成 NaN（约定 C3）。

# %% nbgrader={"solution": true, "grade_id": "reduce_per_token_loss"}
#@save
def reduce_per_token_loss(per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None):
    """把 [B*G, T] 的逐词元损失按 TRL 的 loss_type 归约成标量。

    loss_type:
        "grpo"           回答内有效词元均值（词元数至少按 1 计），再对 B*G 条回答求均值
        "bnpo"           本地批所有有效词元的均值（词元总数至少按 1 计）
        "dr_grpo"        有效词元之和 / (B*G * max_completion_length)
        "dapo", "cispo"  有效词元之和 / max(num_items_in_batch, 1)
    completion_mask 是 bool 或 0/1；被 mask 的位置不影响结果和梯度。违反输入契约时抛出 ValueError（见上方列表）。
    """
    ### BEGIN SOLUTION
    if not (torch.is_tensor(per_token_loss) and per_token_loss.dim() == 2):
        raise ValueError("per_token_loss 必须是形状为 [B*G, T] 的二维张量")
    valid = completion_bool_mask(completion_mask, per_token_loss.shape)  # [B*G, T] bool
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"未知的 loss_type：{loss_type!r}，可选 {LOSS_TYPES}")
    mask = valid.to(per_token_loss.dtype)  # [B*G, T]
    masked = torch.where(valid, per_token_loss, torch.zeros_like(per_token_loss))  # [B*G, T]
    if loss_type == "grpo":
        return (masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return masked.sum() / mask.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        if (max_completion_length is None or isinstance(max_completion_length, bool)
                or int(max_completion_length) != max_completion_length or max_completion_length < per_token_loss.shape[1]):
            raise ValueError(
                f"dr_grpo 需要一个不小于 T={per_token_loss.shape[1]} 的整数 max_completion_length，实际为 {max_completion_length!r}")
        return masked.sum() / (per_token_loss.shape[0] * int(max_completion_length))
    if num_items_in_batch is None:
        raise ValueError(f"{loss_type} 需要 num_items_in_batch（全局批的有效词元数）")
    count = float(num_items_in_batch)
    if not count >= 0:
        raise ValueError(f"num_items_in_batch 必须 >= 0，实际为 {num_items_in_batch!r}")
    return masked.sum() / max(count, 1.0)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_reduce_per_token_loss", "points": 4}
"""检查 reduce_per_token_loss：四种归约在手算例子上的值、cispo 与 dapo 相同、bool 与 0/1 mask、padding 上的 inf、输入契约（可见测试）。"""
from tools.grading import assert_close, expect_value_error

_ptl = torch.tensor([[1.0, 2.0, 3.0, 100.0], [4.0, 100.0, 100.0, float("inf")]], dtype=torch.float64)  # 100 与 inf 位于 padding
_m = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
_cases = {
    "grpo": ((1 + 2 + 3) / 3 + 4 / 1) / 2,
    "bnpo": (1 + 2 + 3 + 4) / 4,
    "dr_grpo": (1 + 2 + 3 + 4) / (2 * 8),
    "dapo": (1 + 2 + 3 + 4) / 20,
    "cispo": (1 + 2 + 3 + 4) / 20,
}
for _lt, _val in _cases.items():
    for _mask_in in (_m, _m.bool(), _m.float()):
        _got = reduce_per_token_loss(_ptl, _mask_in, _lt, max_completion_length=8, num_items_in_batch=20)
        assert_close(_got, torch.tensor(_val, dtype=torch.float64), what=f"loss_type={_lt} 的归约（mask dtype {_mask_in.dtype}）")
expect_value_error(lambda: reduce_per_token_loss(_ptl, _m, "ppo"), "未知 loss_type")
expect_value_error(lambda: reduce_per_token_loss(_ptl, _m, "dr_grpo"), "dr_grpo 缺少 max_completion_length")
expect_value_error(lambda: reduce_per_token_loss(_ptl, _m, "dapo"), "dapo 缺少 num_items_in_batch")
expect_value_error(lambda: reduce_per_token_loss(_ptl, _m[:, :2], "grpo"), "mask 形状不一致")
expect_value_error(lambda: reduce_per_token_loss(_ptl, _m * 0.5, "grpo"), "mask 取值 0.5")
print("reduce_per_token_loss 可见测试通过")
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb03b_loss_family_trl", "test_reduce_per_token_loss", globals())
### END HIDDEN TESTS

# %% [markdown]
# ### 长度偏置：一条 3 词元的回答和一条 30 词元的回答
#
# 设一个批里只有两条回答，长度分别为 3 和 30，`max_completion_length = 32`，每个词元的损失相同。用自动求导
# 读出 `∂L/∂per_token_loss`——这就是每个词元在梯度里的权重——再把一条回答内的权重加起来。
# `grpo` 让**两条回答各占一半**，于是短回答的每个词元权重是长回答的 10 倍；`bnpo`、`dapo` 让**每个词元**
# 一样重，长回答整体的权重是短回答的 10 倍；`dr_grpo` 也让每个词元一样重，只是除以常数 `2 × 32`，
# 权重之和不是 1。
#
# 这就是“长度偏置”：在 `grpo` 下，正优势的短回答每个词元被推得更用力，负优势的长回答每个词元被罚得更轻，
# 模型因此倾向于“对的答案说短、错的答案说长”。Dr. GRPO 与 DAPO 的归约都去掉了对单条回答长度的除法。

# %% nbgrader={"locked": true, "grade_id": "length_bias_example"}
def token_weights(loss_type, lengths, max_completion_length, num_items_in_batch=None):
    """Gradient weight of every token under one reduction (uses the learner's reduce_per_token_loss)."""
    lengths = torch.tensor(lengths)
    mask = torch.arange(max_completion_length)[None, :] < lengths[:, None]  # [B*G, T]
    per_token_loss = torch.ones(mask.shape, dtype=torch.float64, requires_grad=True)  # [B*G, T]
    if num_items_in_batch is None:
        num_items_in_batch = int(mask.sum())
    loss = reduce_per_token_loss(per_token_loss, mask, loss_type,
                                 max_completion_length=max_completion_length, num_items_in_batch=num_items_in_batch)
    (weights,) = torch.autograd.grad(loss, per_token_loss)
    return weights * mask  # [B*G, T]


lengths, l_max = [3, 30], 32
rows = {}
for lt in CLIPPED_LOSS_TYPES:
    w = token_weights(lt, lengths, l_max)
    rows[lt] = {"token_3": w[0, 0].item(), "token_30": w[1, 0].item(),
                "seq_3": w[0].sum().item(), "seq_30": w[1].sum().item()}
print(f"{'loss_type':<9} {'3-token 回答每 token':>18} {'30-token 回答每 token':>20} {'3-token 回答合计':>14} {'30-token 回答合计':>15} {'长/短 每 token':>12}")
for lt, r in rows.items():
    print(f"{lt:<9} {r['token_3']:>18.5f} {r['token_30']:>20.5f} {r['seq_3']:>14.4f} {r['seq_30']:>15.4f} {r['token_30'] / r['token_3']:>12.2f}")

fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
names = list(rows)
x = torch.arange(len(names)).float()
for ax, key, title in ((axes[0], "token", "weight of one token"), (axes[1], "seq", "total weight of one completion")):
    ax.bar(x - 0.2, [rows[n][f"{key}_3"] for n in names], width=0.4, label="3-token completion")
    ax.bar(x + 0.2, [rows[n][f"{key}_30"] for n in names], width=0.4, label="30-token completion")
    ax.set_xticks(x.tolist(), names)
    ax.set_title(title)
    ax.legend(fontsize=8)
fig.tight_layout()
show_figure(fig)

# %% [markdown]
# ### `bnpo` 和 `dapo` 什么时候不同：梯度累积
#
# 上面的例子只有一个本地批，`bnpo` 与 `dapo` 数值相同。真实训练里一个优化步由多个**微批**（梯度累积、多进程）
# 组成。TRL 对 `bnpo` 在每个微批内求词元均值、再除以累积步数；对 `dapo` 则让每个微批都除以**同一个**全局
# 词元数 `num_items_in_batch`。把 3 词元和 30 词元的回答放进两个不同的微批：

# %% nbgrader={"locked": true, "grade_id": "accumulation_example"}
micro_batches = [[3], [30]]
accumulation_steps = len(micro_batches)
global_items = sum(sum(mb) for mb in micro_batches)
for lt in ("bnpo", "dapo"):
    per_token = []
    for mb in micro_batches:
        w = token_weights(lt, mb, l_max, num_items_in_batch=global_items)
        if lt == "bnpo":
            w = w / accumulation_steps  # TRL divides bnpo / grpo / dr_grpo by the accumulation steps
        per_token.append(w[0, 0].item())
    print(f"{lt}: 3-token 回答每 token 权重 {per_token[0]:.5f}，30-token 回答每 token 权重 {per_token[1]:.5f}，"
          f"比值 {per_token[1] / per_token[0]:.2f}")
print(f"全局 token 均值应给每个 token 1/{global_items} = {1 / global_items:.5f}：只有 dapo 做到了")

# %% [markdown]
# ## 第 3 步　clip-higher 与熵塌缩（DAPO 的算例）
#
# 对称裁剪 `clip(r, 1−ε, 1+ε)` 给每个词元的**概率比**同一个上限。可是概率本身的可移动空间与起点有关：
# 一个 `A > 0` 的词元，在一次更新里新概率最多到 `π_old · (1+ε)`，之后梯度就为 0。DAPO 论文的算例：`ε = 0.2` 时，
# `π_old = 0.01` 的词元最多升到 `0.012`（只多了 0.002），`π_old = 0.9` 的词元最多到 `1.08`（实际被概率 1 封住，
# 早就够了）。于是**低概率的“探索性”词元几乎涨不上去**，高概率词元却不受影响——多轮之后分布越来越尖，
# 策略熵快速下降（熵塌缩）。DAPO 的 clip-higher 只放宽上界（`ε_high = 0.28`），给低概率词元更多上升空间，
# 下界 `ε_low = 0.2` 不变（放宽下界会让低概率词元更容易被压到 0，反而加速塌缩）。
#
# 下面的单元算出这个上限并画出来：横轴是 `π_old`，纵轴是一次更新后 `π_new` 能到的最大值与“绝对增量”
# `π_new − π_old`（数值是计算出来的，不是抄的；断言核对 DAPO 的两个数）。

# %% nbgrader={"locked": true, "grade_id": "clip_higher_example"}
def max_new_probability(p_old, epsilon_high):
    """Largest pi_new a positive-advantage token can reach before the clipped branch zeroes its gradient."""
    return torch.clamp(p_old * (1.0 + epsilon_high), max=1.0)


p_examples = torch.tensor([0.01, 0.9], dtype=torch.float64)
reach_02 = max_new_probability(p_examples, 0.2)
unclamped_02 = p_examples * 1.2
assert abs(float(unclamped_02[0]) - 0.012) < 1e-12 and abs(float(unclamped_02[1]) - 1.08) < 1e-12  # DAPO's numbers
for p, cap, raw in zip(p_examples.tolist(), reach_02.tolist(), unclamped_02.tolist()):
    print(f"ε_high=0.2：π_old = {p:.2f} -> π_new 至多 {raw:.4f}（概率上限 1 之后 {cap:.4f}），绝对增量至多 {cap - p:.4f}")
for p, cap in zip(p_examples.tolist(), max_new_probability(p_examples, 0.28).tolist()):
    print(f"ε_high=0.28：π_old = {p:.2f} -> π_new 至多 {cap:.4f}，绝对增量至多 {cap - p:.4f}")

p_grid = torch.logspace(-3, 0, 200, dtype=torch.float64)  # [P]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
for eps_high, style in ((0.2, "-"), (0.28, "--")):
    reach = max_new_probability(p_grid, eps_high)  # [P]
    axes[0].plot(p_grid, reach, style, label=f"eps_high = {eps_high}")
    axes[1].plot(p_grid, reach - p_grid, style, label=f"eps_high = {eps_high}")
axes[0].plot(p_grid, p_grid, color="0.6", lw=0.8, label="pi_new = pi_old")
for ax in axes:
    ax.set_xscale("log")
    ax.set_xlabel("pi_old")
    ax.legend(fontsize=8)
axes[0].set_ylabel("max pi_new in one update")
axes[1].set_ylabel("max increase pi_new - pi_old")
axes[1].set_yscale("log")
for p in (0.01, 0.9):
    axes[0].axvline(p, color="tab:red", lw=0.6)
    axes[1].axvline(p, color="tab:red", lw=0.6)
axes[0].set_title("upper clip: what a positive-advantage token can reach")
axes[1].set_title("low-probability tokens barely move")
fig.tight_layout()
show_figure(fig)
gain = (max_new_probability(p_examples, 0.28) - p_examples) / (reach_02 - p_examples)  # [2]
print(f"把 ε_high 从 0.2 放宽到 0.28：π_old=0.01 的上升空间变为 {gain[0]:.2f} 倍；π_old=0.9 的仍被概率 1 封住（{gain[1]:.2f} 倍）")

# %% [markdown]
# ## 第 4 步　clip-higher 与 GSPO 的序列级概率比（TODO 2、TODO 3）
#
# **clip-higher（DAPO）。** 把对称的 `clip(r, 1−ε, 1+ε)` 换成上下不同的半径
# `clip(r, 1−ε_low, 1+ε_high)`，DAPO 推荐 `ε_low = 0.2`、`ε_high = 0.28`（第 3 步的图）。TRL 里 `epsilon` 就是 `ε_low`，
# `epsilon_high` 不设时等于 `epsilon`。
#
# **GSPO 的序列级概率比。** `importance_sampling_level="sequence"` 时，一条回答只有一个概率比：对数概率比在有效词元
# 上的均值再取指数（几何平均）：
#
# $$
# s_i = \exp\Big(\frac{\sum_t m_{i,t}(\ell^{\theta}_{i,t} - \ell^{\text{old}}_{i,t})}{\max(1, \sum_t m_{i,t})}\Big)
# $$
#
# 裁剪作用在 `s_i` 上，于是要么整条回答被裁剪，要么整条都不裁剪；单个词元的概率比再大也不会单独“死掉”。
# GSPO 论文用很小的裁剪半径（例如 `ε_low = 3e-4`，`ε_high = 4e-4`），因为几何平均比单个词元的概率比稳定得多。
#
# **TODO 2 `importance_ratio`**：`"token"` 返回 `[B*G, T]` 的 `exp(policy − old)`，其中**被掩码的位置先把对数概率比置 0**
# （概率比为 1，约定 C3）；`"sequence"` 返回 `[B*G, 1]` 的 `s_i`（只在有效词元上取均值，词元数至少按 1 计）；
# 其他取值抛出 `ValueError`；三个张量形状必须相同、掩码是 bool 或 0/1（否则 `ValueError`；用 `completion_bool_mask`）。
# 旧对数概率 `old_logps` 是采样时记下的常数（第 2 课：旧策略是数据，不是参数），先 `detach()` 再相减：
# 概率比对参数的梯度只应经过 `policy_logps`；第 3a 课的两个损失也是这样做的。
#
# **TODO 3 `per_token_policy_loss`**：返回归约之前的 `[B*G, T]` 逐词元损失（序列级时把每条回答的值广播到
# 它的 `T` 个位置），概率比用 `importance_ratio`：
# - `loss_type` 为 `"grpo"`、`"bnpo"`、`"dr_grpo"`、`"dapo"`：`−min(r·A, clip(r, 1−ε_low, 1+ε_high)·A)`；
# - `loss_type == "cispo"`：`−sg(min(r, ε_high))·A·ℓ^θ`（此时 `ε_high` 是绝对上限，调用方要自己传 5.0 这样的值）；
# - `beta != 0` 时加 `beta * token_kl_penalty(policy_logps, ref_logps)`（KL 永远是词元级的）；
# - 被掩码的位置：和第 3a 课一样，乘进损失的 `policy_logps` 和 KL 的输入先用 `torch.where` 挡住，那里的损失值
#   不必为 0，但必须有限，并且不影响有效位置的梯度；
# - 契约：`check_policy_inputs(...)`（返回布尔掩码）；`0 <= epsilon_low < 1`；`epsilon_high >= 0`（`cispo` 时 `> 0`）；
#   未知 `loss_type` 或 `importance_sampling_level` 抛出 `ValueError`。

# %% nbgrader={"solution": true, "grade_id": "importance_ratio"}
#@save
def importance_ratio(policy_logps, old_logps, completion_mask, importance_sampling_level="token"):
    """重要性比率。"token" -> [B*G, T] 的 exp(policy - old)（被 mask 处为 1）；"sequence" -> [B*G, 1] 的 exp(有效词元上对数比率的均值)。"""
    ### BEGIN SOLUTION
    if not (torch.is_tensor(policy_logps) and policy_logps.dim() == 2):
        raise ValueError("policy_logps 必须是形状为 [B*G, T] 的二维张量")
    if not torch.is_tensor(old_logps) or old_logps.shape != policy_logps.shape:
        raise ValueError(f"old_logps 的形状必须与 policy_logps 相同 {tuple(policy_logps.shape)}")
    valid = completion_bool_mask(completion_mask, policy_logps.shape)  # [B*G, T] bool
    log_ratio = torch.where(valid, policy_logps - old_logps.detach(), torch.zeros_like(policy_logps))  # [B*G, T] masked before exp
    if importance_sampling_level == "token":
        return torch.exp(log_ratio)  # [B*G, T]
    if importance_sampling_level == "sequence":
        counts = valid.to(log_ratio.dtype).sum(dim=1, keepdim=True).clamp(min=1.0)  # [B*G, 1]
        return torch.exp(log_ratio.sum(dim=1, keepdim=True) / counts)  # [B*G, 1]
    raise ValueError(f"importance_sampling_level 只能是 'token' 或 'sequence'，实际为 {importance_sampling_level!r}")
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_importance_ratio", "points": 3}
"""检查 importance_ratio：词元级比率（被 mask 处为 1）、序列级几何平均（只看有效词元）、padding 上的 800、形状与输入契约（可见测试）。"""
from tools.grading import assert_close, expect_value_error

_p = torch.tensor([[0.2, -0.4, 5.0], [0.3, 0.3, 0.3]], dtype=torch.float64)
_o = torch.zeros(2, 3, dtype=torch.float64)
_m = torch.tensor([[1, 1, 0], [1, 1, 1]])
assert_close(importance_ratio(_p, _o, _m), torch.where(_m.bool(), _p, torch.zeros_like(_p)).exp(),
             what="词元级比率（padding 位置应为 1：先 mask 再 exp）")
assert_close(importance_ratio(_p, _o, _m, "sequence"), torch.tensor([[math.exp(-0.1)], [math.exp(0.3)]], dtype=torch.float64),
             what="序列级比率（padding 位置的 5.0 不应计入）")
_p_big = _p.clone().requires_grad_(True)
with torch.no_grad():
    _p_big[0, 2] = 800.0
_seq = importance_ratio(_p_big, _o, _m.bool(), "sequence")
_seq.sum().backward()
assert bool(torch.isfinite(_p_big.grad).all()) and float(_p_big.grad[0, 2]) == 0.0, "padding 上是 800 时序列级比率的梯度应有限，且 padding 处为 0"
expect_value_error(lambda: importance_ratio(_p, _o, _m, "segment"), "未知 importance_sampling_level")
expect_value_error(lambda: importance_ratio(_p, _o[:1], _m), "old_logps 形状不一致")
expect_value_error(lambda: importance_ratio(_p, _o, _m * 2), "mask 里出现了 2")
print("importance_ratio 可见测试通过")
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb03b_loss_family_trl", "test_importance_ratio", globals())
### END HIDDEN TESTS

# %% nbgrader={"solution": true, "grade_id": "per_token_policy_loss"}
#@save
def per_token_policy_loss(policy_logps, old_logps, advantages, completion_mask, loss_type="grpo", epsilon_low=0.2,
                          epsilon_high=0.28, importance_sampling_level="token", beta=0.0, ref_logps=None):
    """损失家族归约之前的逐词元损失，形状 [B*G, T]。

    loss_type 为 "grpo"/"bnpo"/"dr_grpo"/"dapo"：-min(r*A, clip(r, 1-epsilon_low, 1+epsilon_high)*A)；
    loss_type 为 "cispo"：-detach(min(r, epsilon_high)) * A * policy_logps（epsilon_high 是绝对上限）；
    r 来自 importance_ratio(..., importance_sampling_level)；beta != 0 时加 beta * token_kl_penalty。
    被 mask 的位置先 mask 再 exp：那里的值有限，且不影响有效位置的梯度。违反输入契约时抛出 ValueError。
    """
    ### BEGIN SOLUTION
    valid = check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta=beta, ref_logps=ref_logps)
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"未知的 loss_type：{loss_type!r}，可选 {LOSS_TYPES}")
    if not 0.0 <= epsilon_low < 1.0:
        raise ValueError(f"epsilon_low 必须满足 0 <= epsilon_low < 1，实际为 {epsilon_low}")
    if epsilon_high < 0 or (loss_type == "cispo" and epsilon_high <= 0):
        raise ValueError(f"epsilon_high 必须 >= 0（cispo 时 > 0），实际为 {epsilon_high}")
    ratio = importance_ratio(policy_logps, old_logps, valid, importance_sampling_level)  # [B*G, T] or [B*G, 1]
    adv = advantages.to(policy_logps.dtype).unsqueeze(1)  # [B*G, 1]
    zero = torch.zeros_like(policy_logps)  # [B*G, T]
    safe_policy = torch.where(valid, policy_logps, zero)  # [B*G, T]
    if loss_type == "cispo":
        weight = torch.clamp(ratio, max=epsilon_high).detach()  # [B*G, T] or [B*G, 1]
        per_token_loss = -weight * adv * safe_policy  # [B*G, T]
    else:
        clipped = torch.clamp(ratio, 1.0 - epsilon_low, 1.0 + epsilon_high)  # [B*G, T] or [B*G, 1]
        per_token_loss = -torch.minimum(ratio * adv, clipped * adv)  # [B*G, T] or [B*G, 1]
        per_token_loss = per_token_loss.expand(policy_logps.shape)  # [B*G, T]
    if beta != 0.0:
        safe_ref = torch.where(valid, ref_logps.to(zero.dtype), zero)  # [B*G, T]
        per_token_loss = per_token_loss + beta * token_kl_penalty(safe_policy, safe_ref)  # [B*G, T]
    return per_token_loss
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_per_token_policy_loss", "points": 4}
"""检查 per_token_policy_loss：clip-higher 的上下边界、CISPO 分支、序列级比率的广播、KL、padding 上的极端值与契约（可见测试）。"""
from tools.grading import assert_close, expect_value_error

_r = torch.tensor([[1.25, 1.35, 0.75, 0.7]], dtype=torch.float64)
_p = torch.log(_r)
_o = torch.zeros(1, 4, dtype=torch.float64)
_m = torch.ones(1, 4, dtype=torch.bool)
# A=+1, clip-higher [0.8, 1.28]：1.25 不裁剪，1.35 裁到 1.28；下侧 min 选未裁剪的 r
_got = per_token_policy_loss(_p, _o, torch.tensor([1.0], dtype=torch.float64), _m, "dapo", epsilon_low=0.2, epsilon_high=0.28)
assert_close(_got, -torch.tensor([[1.25, 1.28, 0.75, 0.7]], dtype=torch.float64), what="clip-higher，A=+1")
_got = per_token_policy_loss(_p, _o, torch.tensor([-1.0], dtype=torch.float64), _m, "grpo", epsilon_low=0.2, epsilon_high=0.28)
assert_close(_got, torch.tensor([[1.25, 1.35, 0.8, 0.8]], dtype=torch.float64), what="clip-higher，A=-1")
# CISPO 分支：绝对上限 1.3
_got = per_token_policy_loss(_p, _o, torch.tensor([2.0], dtype=torch.float64), _m, "cispo", epsilon_high=1.3)
assert_close(_got, -torch.tensor([[1.25, 1.3, 0.75, 0.7]], dtype=torch.float64) * 2.0 * _p, what="CISPO 分支的逐 token 损失")
# 序列级：几何平均 s = exp(mean log r)，整条回答共享一个值，形状仍是 [B*G, T]
_s = math.exp(float(_p.mean()))
_got = per_token_policy_loss(_p, _o, torch.tensor([1.0], dtype=torch.float64), _m, "grpo", importance_sampling_level="sequence")
assert_close(_got, torch.full((1, 4), -_s, dtype=torch.float64), what="序列级比率的逐 token 损失（广播到 T 个位置）")
# 与 TODO 1 / TODO 2 一致：对称裁剪 + grpo 归约 = grpo_policy_loss
_gen = torch.Generator().manual_seed(7)
_pp = torch.randn(4, 5, generator=_gen, dtype=torch.float64) - 1.0
_oo = _pp + 0.5 * torch.randn(4, 5, generator=_gen, dtype=torch.float64)
_aa = torch.randn(4, generator=_gen, dtype=torch.float64)
_mm = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 0]])
_ptl = per_token_policy_loss(_pp, _oo, _aa, _mm, "grpo", epsilon_low=0.2, epsilon_high=0.2)
assert_close(reduce_per_token_loss(_ptl, _mm, "grpo"), grpo_policy_loss(_pp, _oo, _aa, _mm, epsilon=0.2), what="grpo 家族与 grpo_policy_loss 一致")
# padding 上的极端值（对数比率 800、参考对数概率 -800）：有效位置的损失与梯度不变，且处处有限
_mm_b = _mm.bool()
_pp_big = torch.where(_mm_b, _pp, _oo + 800.0)
_rr = _pp - 0.2
_rr_big = torch.where(_mm_b, _rr, torch.full_like(_rr, -800.0))
for _lt, _lvl, _eh in (("grpo", "token", 0.28), ("cispo", "token", 5.0), ("dapo", "sequence", 0.28)):
    _leaf_big = _pp_big.clone().requires_grad_(True)
    _leaf_ok = _pp.clone().requires_grad_(True)
    _out_big = per_token_policy_loss(_leaf_big, _oo, _aa, _mm, _lt, epsilon_high=_eh, importance_sampling_level=_lvl, beta=0.1, ref_logps=_rr_big)
    _out_ok = per_token_policy_loss(_leaf_ok, _oo, _aa, _mm, _lt, epsilon_high=_eh, importance_sampling_level=_lvl, beta=0.1, ref_logps=_rr)
    assert bool(torch.isfinite(_out_big).all()), f"{_lt}/{_lvl}：padding 上是极端值时逐词元损失出现了 inf/nan（先 mask 再 exp）"
    assert_close(_out_big * _mm, _out_ok.detach() * _mm, what=f"{_lt}/{_lvl}：padding 上是极端值时有效位置的逐词元损失")
    reduce_per_token_loss(_out_big, _mm, "grpo").backward()
    reduce_per_token_loss(_out_ok, _mm, "grpo").backward()
    assert_close(_leaf_big.grad, _leaf_ok.grad, what=f"{_lt}/{_lvl}：padding 上是极端值时的梯度（出现 nan 说明先 exp 后 mask 了）")
expect_value_error(lambda: per_token_policy_loss(_p, _o, torch.tensor([1.0]), _m, "ppo"), "未知 loss_type")
expect_value_error(lambda: per_token_policy_loss(_p, _o, torch.tensor([1.0]), _m, "grpo", epsilon_low=1.0), "epsilon_low 不在 [0, 1)")
expect_value_error(lambda: per_token_policy_loss(_p, _o, torch.tensor([1.0]), _m, "cispo", epsilon_high=0.0), "cispo 的 epsilon_high <= 0")
print("per_token_policy_loss 可见测试通过")
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb03b_loss_family_trl", "test_per_token_policy_loss", globals())
### END HIDDEN TESTS

# %% [markdown]
# 有了逐词元损失和归约器，整个家族就是两者的组合。下面的 `grpo_family_loss` 是**只读**的组合函数（不评分），
# 它的参数名与 TRL 的 `GRPOConfig` 一致，第 8 步的核对直接调用它。再顺手确认两件事：
# 对称裁剪 + `grpo` 归约就是你在 TODO 1 写的 `grpo_policy_loss`；CISPO 逐词元损失 + `grpo` 归约就是 TODO 2 的
# `cispo_policy_loss`，而换成 TRL 的 `cispo` 归约（全局词元均值）后，变长批上的数值会不同。
# 最后看一眼 GSPO：同一批数据在词元级与序列级下，被裁剪的词元比例。

# %% nbgrader={"locked": true, "grade_id": "grpo_family_loss"}
#@save
def grpo_family_loss(policy_logps, old_logps, advantages, completion_mask, loss_type="grpo", epsilon_low=0.2,
                     epsilon_high=0.28, importance_sampling_level="token", beta=0.0, ref_logps=None,
                     max_completion_length=None, num_items_in_batch=None):
    """The whole loss family: the learner's per-token loss, then the learner's reduction (TRL's argument names)."""
    per_token_loss = per_token_policy_loss(
        policy_logps, old_logps, advantages, completion_mask, loss_type=loss_type, epsilon_low=epsilon_low,
        epsilon_high=epsilon_high, importance_sampling_level=importance_sampling_level, beta=beta, ref_logps=ref_logps,
    )  # [B*G, T]
    return reduce_per_token_loss(per_token_loss, completion_mask, loss_type,
                                 max_completion_length=max_completion_length, num_items_in_batch=num_items_in_batch)


# %% nbgrader={"locked": true, "grade_id": "family_demo"}
def family_demo(seed=3):
    gen = torch.Generator().manual_seed(seed)
    n, t = 8, 12
    old = -torch.rand(n, t, generator=gen) * 2.0 - 0.1  # [B*G, T]
    policy = old + 0.4 * torch.randn(n, t, generator=gen)  # [B*G, T]
    adv = group_relative_advantages(torch.rand(n, generator=gen), 4)  # [B*G]
    lengths = torch.randint(1, t + 1, (n,), generator=gen)  # [B*G]
    mask = torch.arange(t)[None, :] < lengths[:, None]  # [B*G, T]
    items = int(mask.sum())
    same_grpo = grpo_family_loss(policy, old, adv, mask, "grpo", epsilon_low=0.2, epsilon_high=0.2)
    print(f"grpo 家族（对称 ε=0.2） = {same_grpo.item():.6f}，grpo_policy_loss = {grpo_policy_loss(policy, old, adv, mask).item():.6f}")
    cispo_minimind = cispo_policy_loss(policy, old, adv, mask, epsilon_high=5.0)
    cispo_as_grpo = reduce_per_token_loss(per_token_policy_loss(policy, old, adv, mask, "cispo", epsilon_high=5.0), mask, "grpo")
    cispo_trl = grpo_family_loss(policy, old, adv, mask, "cispo", epsilon_high=5.0, num_items_in_batch=items)
    print(f"CISPO：MiniMind 归约 {cispo_minimind.item():.6f} = 家族 + grpo 归约 {cispo_as_grpo.item():.6f}；"
          f"TRL 的 cispo 归约（全局词元均值）{cispo_trl.item():.6f}")
    for lt in CLIPPED_LOSS_TYPES:
        value = grpo_family_loss(policy, old, adv, mask, lt, max_completion_length=t, num_items_in_batch=items)
        print(f"loss_type={lt:<8} clip-higher (0.2, 0.28) 的损失 = {value.item():+.6f}")
    # How far outside the clip band the ratios fall depends on how off-policy the batch is. This demo's per-token
    # log-ratio has standard deviation 0.4 (policy = old + 0.4 * noise): far more off-policy than GSPO's setting,
    # so the sequence-level band of GSPO's paper clips almost everything here. The sweep shrinks the drift.
    for sigma in (0.4, 0.04, 0.004, 0.0004):
        drifted = old + (policy - old) * (sigma / 0.4)  # [B*G, T] the same noise, scaled
        token_r = importance_ratio(drifted, old, mask, "token")  # [B*G, T]
        seq_r = importance_ratio(drifted, old, mask, "sequence").expand(n, t)  # [B*G, T]
        fractions = []
        for r, lo, hi in ((token_r, 0.8, 1.28), (seq_r, 1 - 3e-4, 1 + 4e-4), (seq_r, 0.8, 1.28)):
            fractions.append((((r < lo) | (r > hi)) & mask).sum().item() / items)
        print(f"对数概率比的标准差 σ={sigma:<7g} 裁剪区间外的有效词元比例：词元级 ε=(0.2, 0.28) {fractions[0]:.2f}，"
              f"序列级 ε=(3e-4, 4e-4) {fractions[1]:.2f}，序列级 ε=(0.2, 0.28) {fractions[2]:.2f}")


family_demo()

# %% [markdown]
# 读最后四行时注意：这个演示的逐词元对数概率比标准差是 σ = 0.4（`policy = old + 0.4 × 噪声`），是为了让词元级裁剪
# 看得见而取的大值，比 GSPO 论文的窄区间所针对的情形离线（off-policy）得多。几何平均把噪声缩小到约 σ/√L，但 `3e-4` 的区间仍然比它窄得多，所以 σ = 0.4 那一行的序列级裁剪
# 比例接近 1——这不是“GSPO 什么都裁剪”，而是这批数据离采样策略太远。把同一份噪声缩小（σ = 0.04、0.004、0.0004），
# 序列级窄区间的裁剪比例随之下降；实际训练中概率比离 1 多远，取决于下面这一节说的两件事。
#
# ### 概率比从哪里偏离 1：μ 个轮次，以及一批回答拆成几个优化步
#
# 如果每批回答只用来做**一次**优化步，计算损失时当前策略就是采样策略，概率比恰好是 1，裁剪永远不会触发。
# 概率比偏离 1 有两个来源，所以“μ = 1 就不会裁剪”在 TRL 里并不总是成立：
#
# 1. **μ > 1**：同一批回答反复用 `num_iterations` 个轮次（TRL 的 `num_iterations`，GRPO 论文的 μ），第二轮起策略已经更新过；
# 2. **一批回答拆成几个优化步**：TRL 1.16 的 `GRPOConfig` 里，一次生成的批次大小是
#    `generation_batch_size = per_device_train_batch_size × num_processes × steps_per_generation`，这批回答被切成
#    `steps_per_generation` 片，每片（在 `gradient_accumulation_steps` 个微批累积之后）各做一次优化步。
#    `steps_per_generation` 默认等于 `gradient_accumulation_steps`：整批回答恰好是**一个**优化步，μ = 1 时概率比为 1；
#    把它设得更大（或直接设更大的 `generation_batch_size`），第 2 片以后的损失就在更新过的策略上计算。
#    TRL 因此只在 `gradient_accumulation_steps % (steps_per_generation × num_iterations) != 0` 时另算一遍
#    `old_per_token_logps`，否则直接用 `per_token_logps.detach()`（`trl/trainer/grpo_trainer.py`，
#    `_generate_and_score_completions` 与 `_compute_loss`）。CS336 的作业把同一件事叫作 rollout batch 与 train batch：
#    train batch 比 rollout batch 小，一批 rollout 就要走好几个优化步。
#
# 下面用一个玩具策略（二元语法的 softmax，12 个词元）当场测量：从采样策略采一批 4 × 4 条、每条 6 个词元的回答，
# 用第 3a 课评分过的 `grpo_policy_loss`（ε = 0.2）和 Adam 更新，记录每个优化步**计算损失时**的 max |r − 1| 与
# 落在 [0.8, 1.2] 之外的有效词元比例；三个随机种子。

# %% nbgrader={"locked": true, "grade_id": "ratio_drift_example"}
def ratio_drift(seed, steps_per_generation, num_iterations, lr=0.1, vocab=12, length=6, prompts=4, group=4):
    """One rollout batch of prompts * group answers sampled from a toy bigram policy, used for num_iterations
    passes; each pass splits it into steps_per_generation slices with one optimizer step each (TRL's order).
    Returns [(max |r - 1|, fraction of valid tokens with r outside [0.8, 1.2])] per optimizer step."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.nn.Parameter(torch.randn(vocab, vocab, generator=gen) * 0.5)  # [V, V] next-token logits by previous token
    optimizer = torch.optim.Adam([logits], lr=lr)
    n = prompts * group
    tokens = torch.zeros(n, length + 1, dtype=torch.long)  # [N, 1 + T]
    tokens[:, 0] = torch.arange(n) // group  # the "prompt": one token per group
    with torch.no_grad():
        for t in range(length):
            probs = torch.softmax(logits[tokens[:, t]], dim=-1)  # [N, V]
            tokens[:, t + 1] = torch.multinomial(probs, 1, generator=gen).squeeze(1)

    def answer_logps():
        return torch.log_softmax(logits[tokens[:, :-1]], dim=-1).gather(-1, tokens[:, 1:, None]).squeeze(-1)  # [N, T]

    old = answer_logps().detach()  # [N, T] the sampling policy, recorded once per rollout batch
    advantages = group_relative_advantages((tokens[:, 1:] == 0).float().sum(dim=1), group)  # [N] reward: count of token 0
    mask = torch.ones(n, length, dtype=torch.bool)  # [N, T]
    steps = []
    for _ in range(num_iterations):
        for part in torch.arange(n).chunk(steps_per_generation):
            new = answer_logps()[part]  # [n_part, T]
            ratio = torch.exp(new.detach() - old[part])  # [n_part, T]
            steps.append(((ratio - 1).abs().max().item(), ((ratio < 0.8) | (ratio > 1.2)).float().mean().item()))
            loss = grpo_policy_loss(new, old[part], advantages[part], mask[part], epsilon=0.2)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return steps


drift = {}
for mu, spg in ((1, 1), (1, 4), (2, 1), (2, 4)):
    runs = [ratio_drift(seed, spg, mu) for seed in (0, 1, 2)]  # [seed][optimizer step] -> (max |r-1|, clip fraction)
    drift[(mu, spg)] = runs
    per_step = " | ".join(
        f"{min(r[k][0] for r in runs):.3f}–{max(r[k][0] for r in runs):.3f} ({sum(r[k][1] for r in runs) / 3:.2f})"
        for k in range(len(runs[0])))
    print(f"μ={mu}, steps_per_generation={spg}：每个优化步的 max|r−1|（三个种子的最小–最大，括号里是平均裁剪比例）：{per_step}")
# one optimizer step per rollout batch and mu = 1: the ratio is exactly 1 at every step, for every seed
assert all(step == (0.0, 0.0) for run in drift[(1, 1)] for step in run)
# a later slice of the same rollout batch, or a second pass over it, sees an updated policy: r != 1
assert all(run[0][0] == 0.0 and min(step[0] for step in run[1:]) > 0 for run in drift[(1, 4)] + drift[(2, 1)])

# %% [markdown]
# μ = 1 且每批回答只做一个优化步时，三个种子下每一步的 max |r − 1| 都恰好是 0；同样 μ = 1、但一批回答拆成 4 个优化步时，
# 从第 2 步起概率比就离开了 1，越往后离得越远，括号里的裁剪比例也随之上升；μ = 2 的第二轮同样离开了 1（离多远取决于
# 学习率和已经走过的步数）。所以读 TRL 的配置时，要同时看 `num_iterations` 与 `steps_per_generation`
# （或 `generation_batch_size`）。

# %% [markdown]
# ## 第 5 步　TRL 1.16 的其余 `loss_type` 与选项
#
# 查 TRL 1.16.0 的 `GRPOTrainer._compute_loss` 源码，`loss_type` 除了上面五种还有三种，另有两个改变目标的选项
# （下面的公式都来自那段源码；记 `r` 为 `coef_1 = exp(对数比率)`，词元级或序列级由 `importance_sampling_level` 决定）：
#
# | 名字 | 逐词元损失 | 归约 |
# | --- | --- | --- |
# | `sapo`（SAPO） | 把硬裁剪换成平滑的门：`−σ(τ·(r−1))·4/τ·A`，`τ` 按优势正负取 `sapo_temperature_pos = 1.0` / `sapo_temperature_neg = 1.05` | 同 `grpo` |
# | `luspo`（LUSPO） | 与 `grpo` 相同的裁剪目标（推荐 `importance_sampling_level="sequence"`） | `Σ_t m·ℓ` 对回答求均值：每条回答的损失**乘以它的长度**，抵消 `grpo` 的长度偏置 |
# | `vespo`（VESPO） | `−φ(w)·A·ℓ^θ`，`w = exp(Σ_t 对数概率比)` 是序列级概率比，`φ(w) = e^λ·w^k·e^{−λw}`（`φ(1) = 1`，不求导），`k, λ` 按优势正负取 `vespo_k_pos/neg`、`vespo_lambda_pos/neg` | 同 `dapo` |
# | `delta`（INTELLECT-2 的双侧裁剪） | 裁剪目标里未裁剪的那一支也截断：`r ← min(r, δ)`。`A < 0` 时 `min` 选的是未裁剪的 `r·A`，概率比很大时这一项没有上界；`δ` 给它加上界 | 不变 |
# | `use_bias_correction_kl=True`（默认！） | KL 项乘以概率比：`β·r·KL`，`r` **可导**。on-policy 时 `r = 1`，损失值不变，但梯度多出 `β·KL·∇r` 一项 | 不变 |
#
# 还有梯度累积：`grpo`、`bnpo`、`dr_grpo`、`sapo`、`luspo` 在训练时把损失**再除以累积步数**（每个微批各自归约，
# 累加后恰好是平均）；`dapo`、`cispo`、`vespo` 不除，因为 `num_items_in_batch` 已经是整个累积窗口的词元数。
#
# 下面的 `extended_loss` 是**只读**的参考实现（不评分）：概率比用你写的 `importance_ratio`，归约用你写的
# `reduce_per_token_loss`，其余按上表。最后一节的核对会把它和 TRL 的 `_compute_loss` 逐项比较数值和梯度。
# 注意 TRL 自己是先 `exp` 再掩码的；本课先掩码再 exp（约定 C3），两者只在 padding 上有极端值时不同
# ——那时 TRL 的梯度会出现 NaN。

# %% nbgrader={"locked": true, "grade_id": "more_loss_types"}
#@save
EXTENDED_LOSS_TYPES = LOSS_TYPES + ("sapo", "luspo", "vespo")


def vespo_weights(log_ratio, valid, advantages, k_pos=2.0, lambda_pos=3.0, k_neg=3.0, lambda_neg=2.0):
    """VESPO's gamma weight phi(w) per completion, computed in log space and not differentiated ([B*G, 1])."""
    with torch.no_grad():
        lower = math.log(1e-8)
        seq_log_ratio = torch.where(valid, log_ratio.clamp(-20.0, 20.0), torch.zeros_like(log_ratio)).sum(-1, keepdim=True)  # [B*G, 1]
        log_w = seq_log_ratio.clamp(lower, 20.0)  # [B*G, 1]
        nonneg = advantages >= 0  # [B*G, 1]
        k = torch.where(nonneg, torch.full_like(log_w, k_pos), torch.full_like(log_w, k_neg))  # [B*G, 1]
        lam = torch.where(nonneg, torch.full_like(log_w, lambda_pos), torch.full_like(log_w, lambda_neg)).clamp(min=1e-4)  # [B*G, 1]
        return torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)  # [B*G, 1]


def extended_loss(policy_logps, old_logps, advantages, completion_mask, loss_type="grpo", epsilon_low=0.2,
                  epsilon_high=0.28, importance_sampling_level="token", beta=0.0, ref_logps=None, delta=None,
                  use_bias_correction_kl=False, max_completion_length=None, num_items_in_batch=None,
                  gradient_accumulation_steps=1, sapo_temperature_pos=1.0, sapo_temperature_neg=1.05,
                  vespo_k_pos=2.0, vespo_lambda_pos=3.0, vespo_k_neg=3.0, vespo_lambda_neg=2.0):
    """The scalar training loss of TRL 1.16's _compute_loss for every loss_type and option, built on the learner's
    importance_ratio and reduce_per_token_loss (TRL's argument names; one process, steps_per_generation equal to
    gradient_accumulation_steps)."""
    valid = check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta=beta, ref_logps=ref_logps)
    if loss_type not in EXTENDED_LOSS_TYPES:
        raise ValueError(f"未知的 loss_type：{loss_type!r}，可选 {EXTENDED_LOSS_TYPES}")
    zero = torch.zeros_like(policy_logps)  # [B*G, T]
    safe_policy = torch.where(valid, policy_logps, zero)  # [B*G, T]
    log_ratio = torch.where(valid, policy_logps - old_logps.detach(), zero)  # [B*G, T] masked before exp
    coef_1 = importance_ratio(policy_logps, old_logps, valid, importance_sampling_level)  # [B*G, T] or [B*G, 1]
    adv = advantages.to(policy_logps.dtype).unsqueeze(1)  # [B*G, 1]
    if loss_type == "cispo":
        per_token_loss = -torch.clamp(coef_1, max=epsilon_high).detach() * adv * safe_policy  # [B*G, T]
    elif loss_type == "sapo":
        temperature = torch.where(adv > 0, torch.full_like(adv, sapo_temperature_pos), torch.full_like(adv, sapo_temperature_neg))  # [B*G, 1]
        per_token_loss = -torch.sigmoid(temperature * (coef_1 - 1.0)) * 4.0 / temperature * adv  # [B*G, T] or [B*G, 1]
    elif loss_type == "vespo":
        phi = vespo_weights(log_ratio, valid, adv, vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg)  # [B*G, 1]
        per_token_loss = -phi * adv * safe_policy  # [B*G, T]
    else:  # grpo, bnpo, dr_grpo, dapo, luspo: the clipped surrogate, optionally two-sided (delta)
        clipped = torch.clamp(coef_1, 1.0 - epsilon_low, 1.0 + epsilon_high)  # [B*G, T] or [B*G, 1]
        unclipped = coef_1 if delta is None else torch.clamp(coef_1, max=delta)  # [B*G, T] or [B*G, 1]
        per_token_loss = -torch.minimum(unclipped * adv, clipped * adv)  # [B*G, T] or [B*G, 1]
    per_token_loss = per_token_loss.expand(policy_logps.shape)  # [B*G, T]
    if beta != 0.0:
        kl = token_kl_penalty(safe_policy, torch.where(valid, ref_logps.to(zero.dtype), zero))  # [B*G, T]
        if use_bias_correction_kl:
            kl = kl * coef_1  # [B*G, T]: the ratio stays differentiable, as in TRL
        per_token_loss = per_token_loss + beta * kl  # [B*G, T]
    if loss_type in ("dapo", "cispo", "vespo"):  # num_items_in_batch already spans the accumulation window
        return reduce_per_token_loss(per_token_loss, valid, "dapo", num_items_in_batch=num_items_in_batch)
    if loss_type == "luspo":
        loss = torch.where(valid, per_token_loss, zero).sum(dim=-1).mean()
    else:
        reduction = {"sapo": "grpo"}.get(loss_type, loss_type)
        loss = reduce_per_token_loss(per_token_loss, valid, reduction, max_completion_length=max_completion_length)
    return loss / gradient_accumulation_steps


# %% nbgrader={"locked": true, "grade_id": "more_loss_types_demo"}
def extended_demo(seed=5):
    gen = torch.Generator().manual_seed(seed)
    n, t = 8, 10
    old = -torch.rand(n, t, generator=gen, dtype=torch.float64) * 2.0 - 0.1  # [B*G, T]
    policy = (old + 0.6 * torch.randn(n, t, generator=gen, dtype=torch.float64)).requires_grad_(True)  # [B*G, T]
    ref = old + 0.2 * torch.randn(n, t, generator=gen, dtype=torch.float64)  # [B*G, T]
    adv = group_relative_advantages(torch.rand(n, generator=gen, dtype=torch.float64), 4)  # [B*G]
    mask = torch.arange(t)[None, :] < torch.randint(2, t + 1, (n,), generator=gen)[:, None]  # [B*G, T]
    items = int(mask.sum())
    common = dict(max_completion_length=t, num_items_in_batch=items)
    grpo_value = extended_loss(policy, old, adv, mask, "grpo", **common)
    family_value = grpo_family_loss(policy, old, adv, mask, "grpo", **common)
    assert abs(float((grpo_value - family_value).detach())) < 1e-12, "extended_loss 在默认选项下应与 grpo_family_loss 相同"
    for lt, level in (("sapo", "token"), ("luspo", "sequence"), ("vespo", "token")):
        value = extended_loss(policy, old, adv, mask, lt, importance_sampling_level=level, **common)
        (grad,) = torch.autograd.grad(value, policy)
        print(f"loss_type={lt:<6}（{level:<8}）损失 {value.item():+.6f}，梯度范数 {grad.norm().item():.4f}")
    plain = extended_loss(policy, old, adv, mask, "grpo", epsilon_high=0.28, **common)
    two_sided = extended_loss(policy, old, adv, mask, "grpo", epsilon_high=0.28, delta=1.5, **common)
    ratio = torch.exp(policy - old).detach()[mask]
    print(f"delta=1.5：比率 > 1.5 的有效词元 {int((ratio > 1.5).sum())} 个，损失从 {plain.item():+.6f} 变为 {two_sided.item():+.6f}")
    on_policy_old = policy.detach()
    with_corr = extended_loss(policy, on_policy_old, adv, mask, "grpo", beta=0.04, ref_logps=ref, use_bias_correction_kl=True, **common)
    without = extended_loss(policy, on_policy_old, adv, mask, "grpo", beta=0.04, ref_logps=ref, **common)
    (g_with,) = torch.autograd.grad(with_corr, policy)
    (g_without,) = torch.autograd.grad(without, policy)
    print(f"on-policy，beta=0.04：use_bias_correction_kl 使损失变化 {abs(with_corr.item() - without.item()):.1e}，"
          f"梯度变化（最大绝对差）{(g_with - g_without).abs().max().item():.2e}")
    half = extended_loss(policy, old, adv, mask, "bnpo", gradient_accumulation_steps=2, **common)
    full = extended_loss(policy, old, adv, mask, "bnpo", **common)
    print(f"bnpo：gradient_accumulation_steps=2 时单个微批的损失是 1 步时的 {half.item() / full.item():.2f} 倍")


extended_demo()

# %% [markdown]
# ## 第 6 步　TRL 的优势怎么算（`scale_rewards` 与多目标聚合）
#
# 第 1 课的 `group_relative_advantages` 是 MiniMind 的写法：总体标准差（除以 `G`）加 `1e-4`。TRL 1.16 在
# `_generate_and_score_completions` 里算优势，有两个开关（源码里的名字）：
#
# - `scale_rewards`：`"group"`（默认）除以组内标准差；`"batch"` 除以整个批的标准差（PPO Lite 的建议）；`"none"` 不除
#   （Dr. GRPO 的建议：除以组内标准差会引入题目难度偏置）。均值永远是组内均值。标准差用 `trl.trainer.utils.nanstd`：
#   **Bessel 校正**（除以 `n − 1`），忽略 NaN，再加 `1e-4`；
# - `multi_objective_aggregation`：`"sum_then_normalize"`（默认）先按 `reward_weights` 加权求和再标准化；
#   `"normalize_then_sum"`（GDPO）先把**每个奖励函数**在组内标准化、再加权求和，最后对整个批再标准化一次。
#
# 奖励函数返回 `None` 的地方是 NaN：加权和用 `nansum` 跳过它；所有函数都返回 `None` 的回答（“不可评分”）
# 不参与均值和标准差，优势最后被置为 0。下面的 `trl_layout_advantages` 是**只读**的本课写法（不评分）；
# 最后一节的核对直接执行 TRL 源码里计算优势的那一段，与它比较。

# %% nbgrader={"locked": true, "grade_id": "trl_advantages"}
#@save
def nan_std(values, dim=None, keepdim=False):
    """Bessel-corrected standard deviation ignoring NaN (n - 1 in the denominator; NaN when fewer than 2 values)."""
    if dim is None:
        values, dim = values.reshape(-1), 0
    mean = torch.nanmean(values, dim=dim, keepdim=True)
    count = (~torch.isnan(values)).sum(dim=dim, keepdim=True).to(values.dtype)
    squares = torch.nansum((values - mean) ** 2, dim=dim, keepdim=True)
    std = torch.where(count > 1, torch.sqrt(squares / (count - 1)), torch.full_like(count, float("nan")))
    return std if keepdim else std.squeeze(dim)


def trl_layout_advantages(rewards_per_func, reward_weights, num_generations, scale_rewards="group",
                          multi_objective_aggregation="sum_then_normalize"):
    """Advantages [N] from per-function rewards [N, K] (NaN = the function returned None), TRL 1.16's conventions."""
    weights = torch.as_tensor(reward_weights, dtype=rewards_per_func.dtype)  # [K]
    unscorable = torch.isnan(rewards_per_func).all(dim=1)  # [N]
    nan = torch.tensor(float("nan"), dtype=rewards_per_func.dtype)
    if multi_objective_aggregation == "sum_then_normalize":
        rewards = torch.where(unscorable, nan, (rewards_per_func * weights).nansum(dim=1))  # [N]
        grouped = rewards.view(-1, num_generations)  # [B, G]
        mean = torch.nanmean(grouped, dim=1).repeat_interleave(num_generations)  # [N]
        if scale_rewards in ("group", "none"):
            std = nan_std(grouped, dim=1).repeat_interleave(num_generations)  # [N]
        elif scale_rewards == "batch":
            std = nan_std(rewards).expand_as(rewards)  # [N]
        else:
            raise ValueError(f"scale_rewards 只能是 'group'、'batch' 或 'none'，实际为 {scale_rewards!r}")
        advantages = rewards - mean  # [N]
        if scale_rewards != "none":
            advantages = advantages / (std + 1e-4)  # [N]
    elif multi_objective_aggregation == "normalize_then_sum":
        grouped = rewards_per_func.view(-1, num_generations, rewards_per_func.shape[1])  # [B, G, K]
        per_function = (grouped - torch.nanmean(grouped, dim=1, keepdim=True)) / (nan_std(grouped, dim=1, keepdim=True) + 1e-4)  # [B, G, K]
        rewards = (per_function.reshape(-1, rewards_per_func.shape[1]) * weights).nansum(dim=1)  # [N]
        rewards = torch.where(unscorable, nan, rewards)  # [N]
        advantages = (rewards - torch.nanmean(rewards)) / (nan_std(rewards) + 1e-4)  # [N]
    else:
        raise ValueError(f"multi_objective_aggregation 只能是 'sum_then_normalize' 或 'normalize_then_sum'，实际为 {multi_objective_aggregation!r}")
    return torch.nan_to_num(advantages, nan=0.0)  # [N]: unscorable completions get 0


# %% nbgrader={"locked": true, "grade_id": "trl_advantages_demo"}
_rewards_k = torch.tensor([[1.0, 0.5], [0.0, 1.0], [1.0, float("nan")], [0.0, 0.0],
                           [0.3, 0.2], [0.9, 0.4], [0.1, 0.8], [float("nan"), float("nan")]])  # [N=8, K=2]
_weights = [0.7, 0.3]
for _scale, _agg in (("group", "sum_then_normalize"), ("batch", "sum_then_normalize"), ("none", "sum_then_normalize"),
                     ("group", "normalize_then_sum")):
    print(f"scale_rewards={_scale:<5} {_agg:<18}", trl_layout_advantages(_rewards_k, _weights, 4, _scale, _agg))
_single = torch.tensor([1.0, 0.0, 1.0, 0.0])
_trl_group = trl_layout_advantages(_single[:, None], [1.0], 4)
_minimind = group_relative_advantages(_single, 4)
assert abs(float(_minimind[0] / _trl_group[0]) - math.sqrt(4 / 3)) < 1e-3  # population vs Bessel std
print(f"同一组 [1, 0, 1, 0]：MiniMind（总体 std）{_minimind.tolist()}，TRL（Bessel std）{[round(v, 4) for v in _trl_group.tolist()]}，"
      f"比值 {float(_minimind[0] / _trl_group[0]):.4f} ≈ sqrt(G/(G-1)) = {math.sqrt(4 / 3):.4f}")

# %% [markdown]
# ## 第 7 步　检查题 Q9
#
# 这一题接着第 3a 课的 8 道检查题（MiniMind 第 24 课的清单），考本课的损失家族，自动评分。

# %% [markdown]
# **Q9（数值，本课补充）** 一个批里有一条 3 词元和一条 30 词元的回答，每个词元的损失相同，没有梯度累积。
# 30 词元回答里**单个词元** 的梯度权重是 3 词元回答里单个词元的多少倍？分别给出 `loss_type="grpo"`
# 与 `loss_type="dapo"` 的答案。把答案写成函数 `q9_ratio(short_len, long_len)`，返回 `{"grpo": ..., "dapo": ...}`：
# 本题就是 `q9_ratio(3, 30)`，评分时还会用别的长度检查同一个函数。

# %% nbgrader={"solution": true, "grade_id": "q9_answer"}
def q9_ratio(short_len, long_len):
    """长回答里单个词元的梯度权重是短回答里单个词元的多少倍：{"grpo": ..., "dapo": ...}。"""
    ### BEGIN SOLUTION
    return {"grpo": short_len / long_len, "dapo": 1.0}  # grpo: 1/len per answer; dapo: 1/(all tokens) for each
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_q9", "points": 1}
"""检查 Q9：grpo 与 dapo 归约下长短回答的单 token 权重之比。"""
_q9 = q9_ratio(3, 30)
assert isinstance(_q9, dict) and set(_q9) == {"grpo", "dapo"}, "q9_ratio 应返回键为 'grpo'、'dapo' 的字典"
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb03b_loss_family_trl", "test_q9", globals())
### END HIDDEN TESTS

# %% [markdown]
# ## 第 8 步　框架一致性核对（TRL，PT-CPU）
#
# 这一节不再写新代码，而是把**你在本课写的函数**（以及第 3a 课的两个损失、本课只读的 `extended_loss` 与
# `trl_layout_advantages`）交给 `tools/trl_conformance.py` 的 `check_trl_conformance`，放到 TRL 的 `GRPOTrainer`
# 内部路径旁边逐项核对。核对是为 `trl==1.16.0` 写的：它调用**私有**方法，不启动完整的 Trainer、不加载模型，
# 只用一个记录属性读取的替身对象提供这些方法读到的配置和状态。
#
# | 核对项 | 本课 | TRL 路径 | 通过条件 |
# | --- | --- | --- | --- |
# | 奖励函数 | 正确性与整数格式两个奖励函数 | `GRPOTrainer._calculate_rewards` | 每个函数一列；`None` 变成 NaN；数据集的额外列传给奖励函数 |
# | 损失家族 | `grpo_family_loss`（你的 TODO 1–3）、`grpo_policy_loss`、`cispo_policy_loss` | `GRPOTrainer._compute_loss`，`loss_type` ∈ {`grpo`, `bnpo`, `dr_grpo`, `dapo`, `cispo`} 与 `importance_sampling_level="sequence"` | 损失值与对 `policy_logps` 的梯度都在 `1e-6` 内一致，且输入上裁剪确实发生 |
# | 其余类型与选项 | `extended_loss` | 同上：`sapo`、`luspo`、`vespo`、`delta`、`use_bias_correction_kl=True`、梯度累积的除法 | 同上；并且每个选项在这组输入上确实改变了结果 |
# | 优势 | `trl_layout_advantages` | `_generate_and_score_completions` 里计算优势的源码段（从已安装的 TRL 读出后执行） | `scale_rewards` 为 group / batch / none 与 `normalize_then_sum` 时逐元素一致 |
#
# 需要显式处理的 TRL 1.16.0 事实（核对会逐项测量，而不是照抄）：
#
# - `GRPOConfig.beta` 默认是 `0.0`（没有 KL 项，也不加载参考模型）；`beta > 0` 时 `use_bias_correction_kl` 默认是
#   `True`，KL 项乘以概率比。本课的目标没有这个因子，所以核对家族时设为 `False`，另外单独测默认值的效果。
# - TRL 的 `cispo` 与 MiniMind 一样用**绝对上限** `clamp(r, max=epsilon_high)`，但归约是 `dapo` 式的全局词元均值；
#   `epsilon_high` 不设时等于 `epsilon`（0.2），结果里的 `capped_fraction_at_trl_default` 给出这时被封顶的词元比例。
# - 没装 TRL：结果是 `{"status": "skipped", ...}`。TRL 版本不同：照常运行并在结果中注明；若私有 API 变了
#   （方法或属性不存在、参数名改变），结果是 `{"status": "api_changed", ...}`，写明是哪个属性、哪个版本。

# %% nbgrader={"locked": true, "grade_id": "trl_conformance_code"}
from tools.trl_conformance import TRL_VERSION_WRITTEN_FOR, check_trl_conformance, print_conformance_summary, validate_result

print(f"核对代码已就绪（tools/trl_conformance.py，为 trl=={TRL_VERSION_WRITTEN_FOR} 编写）")

# %% nbgrader={"locked": true, "grade_id": "trl_conformance_run"}
trl_conformance = check_trl_conformance(
    grpo_family_loss=grpo_family_loss, grpo_policy_loss=grpo_policy_loss, cispo_policy_loss=cispo_policy_loss,
    importance_ratio=importance_ratio, group_relative_advantages=group_relative_advantages,
    extended_loss=extended_loss, advantages=trl_layout_advantages,
)
validate_result(trl_conformance)  # tools/schemas/trl-conformance-v1.json
print_conformance_summary(trl_conformance)
print("trl_conformance =", json.dumps(trl_conformance, ensure_ascii=False))
if trl_conformance["status"] == "failed":
    raise AssertionError(f"框架一致性核对失败：{trl_conformance['failed']}")

# %% [markdown]
# 读结果时看这几项：`status`；`loss` 与 `extended` 的每个条目里 `abs_error` 与 `grad_max_abs_error`（都应 ≤ `1e-6`）和
# `clipped_tokens`（> 0 说明裁剪确实发生了，否则这次比较不能证明裁剪写对了）；`trl_reads` 列出 TRL 在该
# `loss_type` 下实际读取的 `model` / `args` / `accelerator` 属性和损失输入（比如只有 `dapo` / `cispo` 读
# `num_items_in_batch`、`args.steps_per_generation`、`accelerator.num_processes`）；`cispo` 条目里的
# `minimind_vs_trl_reduction_diff` 是两种归约在变长批上的差，`one_plus_epsilon_high_abs_error` 是把上限写成
# `1 + ε_high` 时与 TRL 的差（不为 0，说明 TRL 用的是绝对上限）；`grpo_bias_correction_kl.on_policy` 给出 on-policy
# 时 KL 修正对损失（应为 0）和梯度（不为 0）的影响；`advantages` 的每个条目是 TRL 源码与本课写法的最大差。
# `sapo` 的误差不是 0 而是 1e-8 量级：TRL 用 `torch.where(advantages > 0, 1.0, 1.05)` 生成温度，Python 标量在这里
# 得到 float32 的张量，1.05 变成 1.0499999523…；本课的温度是 float64。这种差别在 `1e-6` 的容差之内。
# 最后一行是完整结果的 JSON。运行时 TRL 还会为那条所有奖励函数都返回 `None` 的回答打印一条警告
# （“All reward functions returned None”），这正是核对想触发的情形。

# %% nbgrader={"locked": true, "grade_id": "runtime_report"}
print(f"本次从第一个共享部件单元运行到这里用了 {time.perf_counter() - LESSON_STARTED:.1f} 秒（本机、本次负载下的实测值，不含内核启动）")

# %% [markdown]
# ---
#
# # 🛑 STOP HERE 🛑
#
# 本课到此结束。提交前从头到尾重新运行一遍（Kernel → Restart & Run All），确认每个可见测试都打印了
# “通过”。学员版到这里为止：解析只在教师用的源文件里，评分之后由教师发布。

# %% [markdown] tags=["solution-only"]
# ## 解析
#
# - **归约决定长度偏置。** `grpo` 让每条回答等权，`bnpo` / `dapo` 让每个词元等权，`dr_grpo` 除以常数，`luspo` 把每条
#   回答的损失乘回它的长度。它们的逐词元损失相同，差别只在 `∂L/∂per_token_loss`。`dapo` 与 `bnpo` 的区别只在
#   梯度累积 / 多进程时出现：`dapo` 的分母是整个优化步的词元总数。
# - **clip-higher。** 上界按概率比计，低概率词元的绝对上升空间因此很小；只放宽上界给它们更多空间，减缓熵塌缩。
# - **GSPO。** 序列级概率比是对数概率比的均值再取指数，一条回答共享一个概率比，因此裁剪也是整条回答一起；KL 仍是
#   词元级的。
# - **与框架核对时要对齐的“隐藏约定”。** 优势的标准差（总体 vs Bessel 校正）、KL 的概率比修正
#   （`use_bias_correction_kl`，默认开）、`cispo` 的归约（MiniMind 的回答等权 vs TRL 的全局词元均值）、`epsilon_high`
#   未设置时的默认值、梯度累积时的除法——这些都不会让代码报错，只会让数值悄悄不同。核对框架时，先把这些约定
#   逐项写清楚，再喂同一份输入比较数值和梯度。
