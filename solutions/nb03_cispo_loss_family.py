# ---
# jupyter:
#   kernelspec: {display_name: Python 3, language: python, name: python3}
#   course: {profile: BASE-CPU}
# ---

# %% [markdown]
# # 第 3 课：CISPO 与 GRPO 损失家族
#
# ## 导读
#
# 上一课把 GRPO 的目标拆成了几块：新旧策略的逐 token 比率、双侧裁剪、reference KL、completion mask，以及
# “每条回答等权”的归约。本课在这套部件上回答三个问题：
#
# 1. **CISPO 改了什么？** MiniMind 的 `train_grpo.py` 用一个 `loss_type` 开关在 GRPO 与 CISPO 之间切换。两者共享
#    采样、奖励、组内优势、mask、比率和 KL，只有“策略项”的写法不同。你会亲手写出这两个损失，并画出
#    **GRPO 的梯度在哪里变成 0、CISPO 的梯度为什么还在**。
# 2. **“损失家族”到底差在哪里？** TRL 的 `GRPOTrainer` 用 `loss_type` 区分 `grpo`、`bnpo`、`dr_grpo`、`dapo`、
#    `cispo`。除 `cispo` 的策略项外，它们的逐 token 损失完全相同，差别只在**归约**：把 `[B*G, T]` 的逐 token
#    损失变成一个标量时，每个 token 拿到多大的权重。你会写一个统一的归约器，并用一条 3 token 的回答和一条
#    30 token 的回答算出每种归约的**长度偏置**。再加上 DAPO 的 clip-higher（上下裁剪半径不同）和 GSPO 的
#    **序列级**重要性比率。
# 3. **和框架对得上吗？** 最后一节把你写的函数放到 TRL 1.16.0 的 `GRPOTrainer._compute_loss` 旁边，在比率
#    确实越过裁剪边界的输入上逐个 `loss_type` 核对数值与梯度。
#
# 本课要你实现的函数（名字和签名固定，自动评分与后续课程都依赖它们）：
#
# | TODO | 函数 | 作用 |
# | --- | --- | --- |
# | 1 | `grpo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon=0.2, beta=0.0, ref_logps=None)` | MiniMind 的 GRPO 策略损失（标量） |
# | 2 | `cispo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon_high=5.0, beta=0.0, ref_logps=None)` | MiniMind 的 CISPO 策略损失（标量） |
# | 3 | `reduce_per_token_loss(per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None)` | 损失家族的统一归约器（标量） |
# | 4 | `importance_ratio(policy_logps, old_logps, completion_mask, importance_sampling_level="token")` | token 级或序列级（GSPO）重要性比率 |
# | 5 | `per_token_policy_loss(policy_logps, old_logps, advantages, completion_mask, loss_type="grpo", epsilon_low=0.2, epsilon_high=0.28, importance_sampling_level="token", beta=0.0, ref_logps=None)` | clip-higher / CISPO / GSPO 的逐 token 损失 `[B*G, T]` |
#
# 另外还有一道“梯度在哪里消失”的计算题和 9 道检查题（其中 8 道来自 MiniMind 第 24 课的检查清单，第 9 道
# 是本课补充的损失家族题）。
#
# 完成标准：每个 TODO 下面的可见测试通过；提交后隐藏测试用随机输入、float32/float64、变长 mask 和梯度
# 再核对一遍。

# %% [markdown]
# ## 运行环境
#
# - 本课主体使用 **BASE-CPU** 配置（`torch`、`matplotlib`），几秒内跑完，不需要 GPU，也不下载模型。
# - 最后一节“框架一致性核对”需要 **PT-CPU** 配置（额外安装 `trl==1.16.0`）。没有 TRL 时，这一节报告
#   `{"status": "skipped", ...}` 并说明原因——这不算失败，也不影响评分。
# - 笔记本最上方的启动单元会打印当前环境的检查表；如果表里有红色项，先按提示修好再往下做。

# %% [markdown]
# ## 前置阅读
#
# - 第 1 课（组内相对优势）和第 2 课（比率、裁剪、reference KL、mask、回答等权）。本课直接沿用它们的符号。
# - MiniMind `trainer/train_grpo.py` 的损失部分：`loss_type == "cispo"` 时用截断并 `detach()` 的比率乘以
#   优势和对数概率；否则用 PPO 式的裁剪比率；最后先按回答求有效 token 均值，再对回答求均值。
# - 论文（可选）：CISPO 出自 MiniMax-M1（arXiv 2506.13585），`ε_max = 5.0` 的推荐值见 ScaleRL（arXiv
#   2510.13786）；DAPO（arXiv 2503.14476：clip-higher 与 token 级归约）；Dr. GRPO（arXiv 2503.20783：用常数
#   归约消除长度偏置）；GSPO（arXiv 2507.18071：序列级重要性比率）。
# - TRL 文档中 `GRPOConfig` 的 `loss_type`、`epsilon`、`epsilon_high`、`importance_sampling_level`、`beta` 参数说明。

# %% [markdown]
# ## 第 1 步：符号与共享部件
#
# 记 `B` 为一个批次里的 prompt 数，`G = num_generations` 为每个 prompt 采样的回答数，`T` 为回答的最大 token 数。
# MiniMind 和 TRL 都把同一个 prompt 的 `G` 条回答**连续**排在平铺的第 0 维上（第 `i` 个 prompt 的第 `j` 条回答
# 在下标 `i*G + j`），所以：
#
# | 张量 | 形状 | 含义 |
# | --- | --- | --- |
# | `rewards` | `[B*G]` | 每条回答一个标量奖励 |
# | `grouped_rewards` | `[B, G]` | `rewards.view(-1, G)`：一行是一个 prompt 的一组回答 |
# | `advantages` | `[B*G]` | 组内相对优势（序列级，一条回答一个数） |
# | `policy_logps` / `old_logps` / `ref_logps` | `[B*G, T]` | 当前策略 / 采样时的旧策略 / 冻结 reference 的逐 token 对数概率 |
# | `completion_mask` | `[B*G, T]` | 有效回答 token（含第一个 EOS）为 1，其余为 0 |
# | `per_token_loss` | `[B*G, T]` | 归约之前的逐 token 损失 |
#
# 公式里用 `ℓ^θ_{i,t}`、`ℓ^old_{i,t}`、`ℓ^ref_{i,t}` 分别表示 `policy_logps`、`old_logps`、`ref_logps` 的第 `(i, t)` 个元素，
# `A_i` 是 `advantages[i]`，`m_{i,t}` 是 `completion_mask[i, t]`。
#
# 下面的单元给出三个**只读**的共享部件（不评分，直接使用）：
#
# - `token_kl_penalty`：第 2 课写过的非负 KL 估计 `exp(Δ) − Δ − 1`，其中 `Δ = ref − policy`；
# - `group_relative_advantages`：MiniMind 的平铺写法 `(R − mean) / (std + eps)`，`std` 是总体标准差
#   （`unbiased=False`），`eps = 1e-4`；
# - `check_policy_inputs`：检查张量形状等输入契约，违反时抛出带中文说明的 `ValueError`。你的函数应当先调用它。

# %% nbgrader={"locked": true, "grade_id": "shared_helpers"}
import io
import math

import matplotlib.pyplot as plt
import torch
from IPython.display import Image, display

torch.set_printoptions(precision=4, sci_mode=False)
plt.rcParams["axes.unicode_minus"] = False
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo")  # TRL's names for the loss family


def token_kl_penalty(policy_logps, ref_logps):
    """Non-negative per-token KL estimate exp(d) - d - 1 with d = ref - policy (graded in notebook 2)."""
    delta = ref_logps - policy_logps  # [B*G, T]
    return torch.exp(delta) - delta - 1.0  # [B*G, T]


def group_relative_advantages(rewards, num_generations, eps=1e-4):
    """MiniMind's flat layout: (R - group mean) / (population std + eps), one value per completion."""
    grouped = rewards.view(-1, num_generations)  # [B, G]
    mean = grouped.mean(dim=1).repeat_interleave(num_generations)  # [B*G]
    std = grouped.std(dim=1, unbiased=False).repeat_interleave(num_generations)  # [B*G]
    return (rewards - mean) / (std + eps)  # [B*G]


def check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta=0.0, ref_logps=None):
    """Raise ValueError (Chinese message) when the tensors break the loss functions' input contract."""
    if not (torch.is_tensor(policy_logps) and policy_logps.dim() == 2):
        raise ValueError("policy_logps 必须是形状为 [B*G, T] 的二维张量")
    shape = tuple(policy_logps.shape)
    for name, value in (("old_logps", old_logps), ("completion_mask", completion_mask)):
        if not torch.is_tensor(value) or tuple(value.shape) != shape:
            got = tuple(value.shape) if torch.is_tensor(value) else type(value).__name__
            raise ValueError(f"{name} 的形状必须与 policy_logps 相同 {shape}，实际为 {got}")
    if not (torch.is_tensor(advantages) and advantages.dim() == 1 and advantages.shape[0] == shape[0]):
        got = tuple(advantages.shape) if torch.is_tensor(advantages) else type(advantages).__name__
        raise ValueError(f"advantages 必须是长度为 B*G={shape[0]} 的一维张量（每条回答一个优势），实际为 {got}")
    if beta < 0:
        raise ValueError(f"beta 必须 >= 0，实际为 {beta}")
    if beta > 0:
        if ref_logps is None:
            raise ValueError("beta > 0 时必须给出 ref_logps（reference 模型的逐 token 对数概率）")
        if not torch.is_tensor(ref_logps) or tuple(ref_logps.shape) != shape:
            got = tuple(ref_logps.shape) if torch.is_tensor(ref_logps) else type(ref_logps).__name__
            raise ValueError(f"ref_logps 的形状必须与 policy_logps 相同 {shape}，实际为 {got}")


def show_figure(fig):
    """Embed a figure as PNG whatever the matplotlib backend (also under MPLBACKEND=Agg), then close it."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    display(Image(data=buffer.getvalue(), format="png"))


print("共享部件已就绪：token_kl_penalty, group_relative_advantages, check_policy_inputs, LOSS_TYPES =", LOSS_TYPES)

# %% [markdown]
# ## 第 2 步：GRPO 的策略项（TODO 1）
#
# MiniMind 的 GRPO 分支就是 PPO 的裁剪目标，只是优势换成了组内相对优势、并且没有 value loss。对第 `i` 条回答的
# 第 `t` 个 token：
#
# $$
# r_{i,t} = \exp(\ell^{\theta}_{i,t} - \ell^{\text{old}}_{i,t}),\qquad
# \text{per\_token\_loss}_{i,t} = -\Big(\min\big(r_{i,t}A_i,\ \operatorname{clip}(r_{i,t}, 1-\varepsilon, 1+\varepsilon)A_i\big) - \beta\,\mathrm{KL}_{i,t}\Big)
# $$
#
# 归约（MiniMind 与 TRL 的 `loss_type="grpo"` 相同）：先在每条回答的有效 token 上求均值（有效 token 数按
# `clamp(min=1)` 处理，全被 mask 掉的回答贡献 0），再对 `B*G` 条回答求均值：
#
# $$
# \mathcal{L} = \frac{1}{B G}\sum_{i}\frac{\sum_t m_{i,t}\,\text{per\_token\_loss}_{i,t}}{\max(1, \sum_t m_{i,t})}
# $$
#
# 提示：
# - 先调用 `check_policy_inputs(...)`；再检查 `0 <= epsilon < 1`，否则抛出中文 `ValueError`。
# - `advantages` 是 `[B*G]`，用 `advantages.unsqueeze(1)` 广播到 `[B*G, T]`。
# - `completion_mask` 可能是 bool 或 0/1 整数，先转成损失的 dtype 再相乘。
# - 只在 `beta != 0` 时加 KL 项（`beta = 0` 时可以不给 `ref_logps`）。

# %% nbgrader={"solution": true, "grade_id": "grpo_policy_loss"}
def grpo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon=0.2, beta=0.0, ref_logps=None):
    """GRPO 策略损失（MiniMind 的 loss_type="grpo"）。

    参数：
        policy_logps:    [B*G, T] 当前策略的逐 token 对数概率（需要梯度）
        old_logps:       [B*G, T] 采样时旧策略的逐 token 对数概率
        advantages:      [B*G]    每条回答的组内相对优势
        completion_mask: [B*G, T] 有效 token 为 1/True
        epsilon:         裁剪半径 ε，要求 0 <= ε < 1
        beta:            reference KL 系数 β >= 0
        ref_logps:       [B*G, T] reference 对数概率；beta > 0 时必须给出
    返回：
        标量张量：每条回答的有效 token 均值（token 数至少按 1 计），再对回答求均值。
    违反输入契约（形状、epsilon、beta、ref_logps）时抛出 ValueError。
    """
    ### BEGIN SOLUTION
    check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta=beta, ref_logps=ref_logps)
    if not 0.0 <= epsilon < 1.0:
        raise ValueError(f"epsilon 必须满足 0 <= epsilon < 1，实际为 {epsilon}")
    ratio = torch.exp(policy_logps - old_logps)  # [B*G, T]
    clipped_ratio = torch.clamp(ratio, 1.0 - epsilon, 1.0 + epsilon)  # [B*G, T]
    adv = advantages.unsqueeze(1)  # [B*G, 1]
    per_token_loss = -torch.minimum(ratio * adv, clipped_ratio * adv)  # [B*G, T]
    if beta != 0.0:
        per_token_loss = per_token_loss + beta * token_kl_penalty(policy_logps, ref_logps)  # [B*G, T]
    mask = completion_mask.to(per_token_loss.dtype)  # [B*G, T]
    per_sequence = (per_token_loss * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)  # [B*G]
    return per_sequence.mean()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_grpo_policy_loss", "points": 4}
"""检查 grpo_policy_loss：手算的裁剪案例、按回答等权的归约、KL 项、全 mask 行、梯度与输入契约（可见测试）。"""
from tools.grading import assert_close, expect_value_error

# 比率 [1.5, 0.5, 1.1]（相对 old=0），ε=0.2。第 0 条回答 A=+1（3 个有效 token），第 1 条 A=-1（前 2 个有效）。
_ratios = torch.tensor([[1.5, 0.5, 1.1], [1.5, 0.5, 1.1]], dtype=torch.float64)
_policy = torch.log(_ratios).requires_grad_(True)
_old = torch.zeros(2, 3, dtype=torch.float64)
_adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
_mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
_loss = grpo_policy_loss(_policy, _old, _adv, _mask, epsilon=0.2)
# A=+1: min(r, clip(r)) = [1.2, 0.5, 1.1]；A=-1: min(-r, -clip(r)) = [-1.5, -0.8]
_expected = (-(1.2 + 0.5 + 1.1) / 3 + (1.5 + 0.8) / 2) / 2
assert_close(_loss, torch.tensor(_expected, dtype=torch.float64), what="GRPO 损失（先回答内均值，再回答间均值）")
_loss.backward()
# 被裁剪的分支梯度为 0；未裁剪的 token 对 log π 的梯度是 -A·r /（回答 token 数 × 回答条数）
_expected_grad = torch.tensor([[0.0, -0.5 / 6, -1.1 / 6], [1.5 / 4, 0.0, 0.0]], dtype=torch.float64)
assert_close(_policy.grad, _expected_grad, what="GRPO 损失对 policy_logps 的梯度")

# KL 项：policy 与 reference 相同时 KL=0；不同时按 +beta*KL 进入损失
_ref = _policy.detach() - 0.3
_with_kl = grpo_policy_loss(_policy.detach(), _old, _adv, _mask, epsilon=0.2, beta=0.1, ref_logps=_ref)
_kl = math.exp(-0.3) + 0.3 - 1.0
assert_close(_with_kl, torch.tensor(_expected + 0.1 * _kl, dtype=torch.float64), what="带 KL 的 GRPO 损失")

# 全被 mask 掉的回答贡献 0，但仍计入回答条数
_mask_empty = torch.tensor([[1, 1, 1], [0, 0, 0]])
_loss_empty = grpo_policy_loss(_policy.detach(), _old, _adv, _mask_empty, epsilon=0.2)
assert_close(_loss_empty, torch.tensor(-(1.2 + 0.5 + 1.1) / 3 / 2, dtype=torch.float64), what="含全 mask 行的 GRPO 损失")

expect_value_error(lambda: grpo_policy_loss(_policy, _old[:, :2], _adv, _mask), "old_logps 形状不一致")
expect_value_error(lambda: grpo_policy_loss(_policy, _old, _adv[:1], _mask), "advantages 长度不是 B*G")
expect_value_error(lambda: grpo_policy_loss(_policy, _old, _adv, _mask, epsilon=1.5), "epsilon 不在 [0, 1)")
expect_value_error(lambda: grpo_policy_loss(_policy, _old, _adv, _mask, beta=0.1), "beta > 0 但没有 ref_logps")
print("grpo_policy_loss 可见测试通过")
### BEGIN HIDDEN TESTS
def _h_ref_grpo(policy, old, adv, mask, epsilon, beta, ref):
    policy, old, adv = policy.double(), old.double(), adv.double()
    mask = mask.double()
    ratio = (policy - old).exp()
    low, high = 1.0 - epsilon, 1.0 + epsilon
    clipped = torch.where(ratio < low, torch.full_like(ratio, low), torch.where(ratio > high, torch.full_like(ratio, high), ratio))
    a = adv[:, None]
    surrogate = torch.where(ratio * a <= clipped * a, ratio * a, clipped * a)
    loss = -surrogate
    if beta:
        d = ref.double() - policy
        loss = loss + beta * (d.exp() - d - 1.0)
    rows = []
    for i in range(policy.shape[0]):
        n = float(mask[i].sum().item())
        rows.append((loss[i] * mask[i]).sum() / (n if n >= 1 else 1.0))
    return torch.stack(rows).mean()


def _h_case(gen, n, t, dtype, spread=0.9, empty_row=False):
    old = -torch.rand(n, t, generator=gen, dtype=torch.float64) * 3.0 - 0.05
    policy = old + (torch.rand(n, t, generator=gen, dtype=torch.float64) * 2.0 - 1.0) * spread
    ref = old + torch.randn(n, t, generator=gen, dtype=torch.float64) * 0.3
    adv = torch.randn(n, generator=gen, dtype=torch.float64)
    lengths = torch.randint(1, t + 1, (n,), generator=gen)
    mask = torch.arange(t)[None, :] < lengths[:, None]
    if empty_row:
        mask[0] = False
    return policy.to(dtype), old.to(dtype), adv.to(dtype), mask, ref.to(dtype)


_h_gen = torch.Generator().manual_seed(3003)
_h_seen = []
for _h_dtype, _h_n, _h_t, _h_eps, _h_beta, _h_empty, _h_mask_kind in [
    (torch.float64, 6, 9, 0.2, 0.0, False, "bool"),
    (torch.float32, 8, 5, 0.2, 0.04, True, "int"),
    (torch.float64, 12, 17, 0.1, 0.1, False, "float"),
    (torch.float32, 3, 1, 0.3, 0.0, False, "bool"),
    (torch.float64, 16, 31, 0.2, 0.02, True, "int"),
]:
    _hp, _ho, _ha, _hm, _hr = _h_case(_h_gen, _h_n, _h_t, _h_dtype, empty_row=_h_empty)
    _hm_in = {"bool": _hm, "int": _hm.long(), "float": _hm.to(_h_dtype)}[_h_mask_kind]
    _tol = 1e-9 if _h_dtype == torch.float64 else 2e-5
    _hp_leaf = _hp.clone().requires_grad_(True)
    _out = grpo_policy_loss(_hp_leaf, _ho, _ha, _hm_in, epsilon=_h_eps, beta=_h_beta, ref_logps=_hr if _h_beta else None)
    assert _out.dim() == 0, f"grpo_policy_loss 应返回标量，实际形状 {tuple(_out.shape)}"
    _refp = _hp.double().clone().requires_grad_(True)
    _expected = _h_ref_grpo(_refp, _ho, _ha, _hm, _h_eps, _h_beta, _hr)
    assert_close(_out, _expected, atol=_tol, rtol=_tol, what=f"GRPO 损失（{_h_dtype}, {_h_n}x{_h_t}, beta={_h_beta}）")
    _out.backward()
    _expected.backward()
    assert_close(_hp_leaf.grad, _refp.grad, atol=_tol, rtol=_tol, what="GRPO 损失的梯度")
    _h_seen.append(float(_out.item()))
    # padded positions must not matter
    _hp_pad = torch.where(_hm, _hp, _hp + 0.7)
    _out_pad = grpo_policy_loss(_hp_pad, _ho, _ha, _hm_in, epsilon=_h_eps, beta=_h_beta, ref_logps=_hr if _h_beta else None)
    assert_close(_out_pad, _out.detach(), atol=_tol, rtol=_tol, what="改变 padding 位置的数值后 GRPO 损失不应变化")
assert len(set(round(v, 8) for v in _h_seen)) == len(_h_seen), "不同输入给出了相同的损失：结果必须依赖输入"
# sequence mean, not token mean: two rows of very different length
_lp = torch.log(torch.tensor([[1.1, 1.1, 1.1, 1.1], [0.9, 0.9, 0.9, 0.9]], dtype=torch.float64))
_lm = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 1]])
_la = torch.tensor([1.0, 1.0], dtype=torch.float64)
assert_close(grpo_policy_loss(_lp, torch.zeros(2, 4, dtype=torch.float64), _la, _lm), torch.tensor(-(1.1 + 0.9) / 2, dtype=torch.float64),
             what="回答等权归约（不是所有 token 的均值）")
_bad = _h_case(_h_gen, 4, 3, torch.float64)
expect_value_error(lambda: grpo_policy_loss(_bad[0], _bad[1], _bad[2], _bad[3][:, :2]), "completion_mask 形状不一致")
expect_value_error(lambda: grpo_policy_loss(_bad[0], _bad[1], _bad[2][None, :], _bad[3]), "advantages 不是一维")
expect_value_error(lambda: grpo_policy_loss(_bad[0][0], _bad[1][0], _bad[2], _bad[3][0]), "policy_logps 不是二维")
expect_value_error(lambda: grpo_policy_loss(_bad[0], _bad[1], _bad[2], _bad[3], epsilon=-0.1), "epsilon < 0")
expect_value_error(lambda: grpo_policy_loss(_bad[0], _bad[1], _bad[2], _bad[3], beta=-0.1), "beta < 0")
expect_value_error(lambda: grpo_policy_loss(_bad[0], _bad[1], _bad[2], _bad[3], beta=0.1, ref_logps=_bad[4][:, :1]), "ref_logps 形状不一致")
### END HIDDEN TESTS

# %% [markdown]
# ## 第 3 步：CISPO 改了什么（TODO 2）
#
# GRPO 的 `min(r·A, clip(r)·A)` 有一个副作用：当比率越过裁剪边界、而且 `min` 选中了裁剪分支时，这个 token 的
# 损失变成常数 `clip(r)·A`，**对参数的梯度整个消失**——这个 token 在本次更新里不再有任何作用。
# CISPO（MiniMax-M1）换了一种写法：裁剪的是**重要性权重**本身，并把它当作常数（`detach`），梯度只走
# `log π`：
#
# $$
# \text{per\_token\_loss}_{i,t} = -\Big(\operatorname{sg}\big(\min(r_{i,t}, \varepsilon_{\text{high}})\big)\,A_i\,\ell^{\theta}_{i,t} - \beta\,\mathrm{KL}_{i,t}\Big)
# $$
#
# 其中 `sg` 是 stop-gradient（`.detach()`）。于是 `∂ per_token_loss / ∂ ℓ^θ = −min(r, ε_high)·A`：权重被截断，
# 但**永远不为 0**（除非 A=0）。归约和 GRPO 一样（MiniMind：先回答内均值，再回答间均值）。
#
# **注意上限的写法。** MiniMind 与 TRL 1.16.0 都把 `ε_high` 当作比率的**绝对上限**：`clamp(r, max=ε_high)`，
# 默认 `ε_high = 5.0`（ScaleRL 推荐值）。也有实现把 CISPO 的上限写成 `1 + ε_high`（与 DAPO 的 clip-higher
# 共用一套“半径”记号），这时 `ε_high = 5.0` 意味着上限 6。两种写法只差一个常数，但读别人的配置时必须先确认是哪一种。
# 本课按 MiniMind 的绝对上限实现。
#
# 提示：先 `check_policy_inputs(...)`，再检查 `epsilon_high > 0`；`torch.clamp(ratio, max=epsilon_high).detach()`。

# %% nbgrader={"solution": true, "grade_id": "cispo_policy_loss"}
def cispo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon_high=5.0, beta=0.0, ref_logps=None):
    """CISPO 策略损失（MiniMind 的 loss_type="cispo"）。

    参数与 grpo_policy_loss 相同，只是裁剪参数换成 epsilon_high：比率的**绝对**上限（> 0，默认 5.0），
    截断后的比率不参与求导（detach），梯度只经过 policy_logps。
    返回：标量张量，归约方式与 grpo_policy_loss 相同（回答内有效 token 均值，再对回答求均值）。
    违反输入契约（形状、epsilon_high <= 0、beta、ref_logps）时抛出 ValueError。
    """
    ### BEGIN SOLUTION
    check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta=beta, ref_logps=ref_logps)
    if not epsilon_high > 0:
        raise ValueError(f"epsilon_high（比率的绝对上限）必须 > 0，实际为 {epsilon_high}")
    ratio = torch.exp(policy_logps - old_logps)  # [B*G, T]
    clamped_ratio = torch.clamp(ratio, max=epsilon_high).detach()  # [B*G, T]
    per_token_loss = -clamped_ratio * advantages.unsqueeze(1) * policy_logps  # [B*G, T]
    if beta != 0.0:
        per_token_loss = per_token_loss + beta * token_kl_penalty(policy_logps, ref_logps)  # [B*G, T]
    mask = completion_mask.to(per_token_loss.dtype)  # [B*G, T]
    per_sequence = (per_token_loss * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)  # [B*G]
    return per_sequence.mean()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_cispo_policy_loss", "points": 4}
"""检查 cispo_policy_loss：绝对上限、detach 后的梯度、KL 项、归约与输入契约（可见测试）。"""
from tools.grading import assert_close, expect_value_error

# 比率 [1.5, 0.5, 7.0]，上限 5.0 -> 权重 [1.5, 0.5, 5.0]；policy_logps = [-0.2, -1.0, -0.5]
_policy = torch.tensor([[-0.2, -1.0, -0.5], [-0.2, -1.0, -0.5]], dtype=torch.float64, requires_grad=True)
_old = _policy.detach() - torch.log(torch.tensor([1.5, 0.5, 7.0], dtype=torch.float64))
_adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
_mask = torch.tensor([[True, True, True], [True, True, False]])
_loss = cispo_policy_loss(_policy, _old, _adv, _mask, epsilon_high=5.0)
_expected = (-(1.5 * -0.2 + 0.5 * -1.0 + 5.0 * -0.5) / 3 + (1.5 * -0.2 + 0.5 * -1.0) / 2) / 2
assert_close(_loss, torch.tensor(_expected, dtype=torch.float64), what="CISPO 损失（绝对上限 5.0）")
_loss.backward()
# detach 之后，对 log π 的梯度就是 -min(r, 5)·A /（回答 token 数 × 回答条数），包括比率为 7 的 token
_expected_grad = torch.tensor([[-1.5 / 6, -0.5 / 6, -5.0 / 6], [1.5 / 4, 0.5 / 4, 0.0]], dtype=torch.float64)
assert_close(_policy.grad, _expected_grad, what="CISPO 损失对 policy_logps 的梯度（权重应 detach）")

_ref = _policy.detach() + 0.2
_with_kl = cispo_policy_loss(_policy.detach(), _old, _adv, _mask, epsilon_high=5.0, beta=0.5, ref_logps=_ref)
_kl = math.exp(0.2) - 0.2 - 1.0
assert_close(_with_kl, torch.tensor(_expected + 0.5 * _kl, dtype=torch.float64), what="带 KL 的 CISPO 损失")

expect_value_error(lambda: cispo_policy_loss(_policy, _old, _adv, _mask, epsilon_high=0.0), "epsilon_high <= 0")
expect_value_error(lambda: cispo_policy_loss(_policy, _old.T, _adv, _mask), "old_logps 形状不一致")
expect_value_error(lambda: cispo_policy_loss(_policy, _old, _adv, _mask, beta=0.1), "beta > 0 但没有 ref_logps")
print("cispo_policy_loss 可见测试通过")
### BEGIN HIDDEN TESTS
def _h_case(gen, n, t, dtype, spread=0.9, empty_row=False):
    old = -torch.rand(n, t, generator=gen, dtype=torch.float64) * 3.0 - 0.05
    policy = old + (torch.rand(n, t, generator=gen, dtype=torch.float64) * 2.0 - 1.0) * spread
    ref = old + torch.randn(n, t, generator=gen, dtype=torch.float64) * 0.3
    adv = torch.randn(n, generator=gen, dtype=torch.float64)
    lengths = torch.randint(1, t + 1, (n,), generator=gen)
    mask = torch.arange(t)[None, :] < lengths[:, None]
    if empty_row:
        mask[0] = False
    return policy.to(dtype), old.to(dtype), adv.to(dtype), mask, ref.to(dtype)


def _h_ref_cispo(policy, old, adv, mask, cap, beta, ref):
    policy, old, adv, mask = policy.double(), old.double(), adv.double(), mask.double()
    weight = (policy.detach() - old).exp()
    weight = torch.where(weight > cap, torch.full_like(weight, cap), weight)
    loss = -(weight * adv[:, None] * policy)
    if beta:
        d = ref.double() - policy
        loss = loss + beta * (d.exp() - d - 1.0)
    total = torch.zeros((), dtype=torch.float64)
    for i in range(policy.shape[0]):
        n = float(mask[i].sum().item())
        total = total + (loss[i] * mask[i]).sum() / (n if n >= 1 else 1.0)
    return total / policy.shape[0]


_h_gen = torch.Generator().manual_seed(3004)
_h_seen = []
for _h_dtype, _h_n, _h_t, _h_cap, _h_beta, _h_spread in [
    (torch.float64, 6, 9, 5.0, 0.0, 2.2),     # log-ratios up to 2.2: ratios between 5 and 6 and above 6
    (torch.float32, 8, 5, 5.0, 0.04, 2.2),
    (torch.float64, 10, 13, 1.5, 0.1, 1.2),   # a small cap: 1.5 vs 2.5 if read as 1 + eps_high
    (torch.float32, 4, 1, 2.0, 0.0, 1.3),
    (torch.float64, 16, 23, 5.0, 0.02, 1.9),
]:
    _hp, _ho, _ha, _hm, _hr = _h_case(_h_gen, _h_n, _h_t, _h_dtype, spread=_h_spread, empty_row=(_h_n == 8))
    _tol = 1e-9 if _h_dtype == torch.float64 else 2e-5
    _ratio = (_hp.double() - _ho.double()).exp()
    assert bool(((_ratio > _h_cap) & _hm).any()), "hidden fixture must exceed the cap"
    _hp_leaf = _hp.clone().requires_grad_(True)
    _out = cispo_policy_loss(_hp_leaf, _ho, _ha, _hm, epsilon_high=_h_cap, beta=_h_beta, ref_logps=_hr if _h_beta else None)
    assert _out.dim() == 0, f"cispo_policy_loss 应返回标量，实际形状 {tuple(_out.shape)}"
    _refp = _hp.double().clone().requires_grad_(True)
    _expected = _h_ref_cispo(_refp, _ho, _ha, _hm, _h_cap, _h_beta, _hr)
    assert_close(_out, _expected, atol=_tol, rtol=_tol, what=f"CISPO 损失（{_h_dtype}, 上限 {_h_cap}）")
    _out.backward()
    _expected.backward()
    assert_close(_hp_leaf.grad, _refp.grad, atol=_tol, rtol=_tol, what="CISPO 损失的梯度（截断比率必须 detach）")
    _h_seen.append(float(_out.item()))
assert len(set(round(v, 8) for v in _h_seen)) == len(_h_seen), "不同输入给出了相同的损失：结果必须依赖输入"
# token-mean instead of sequence-mean must fail here
_lp = torch.tensor([[-1.0, -1.0, -1.0, -1.0], [-0.5, -0.5, -0.5, -0.5]], dtype=torch.float64)
_lm = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 1]])
assert_close(cispo_policy_loss(_lp, _lp, torch.tensor([1.0, 1.0], dtype=torch.float64), _lm),
             torch.tensor((1.0 + 0.5) / 2, dtype=torch.float64), what="CISPO 的回答等权归约")
_bad = _h_case(_h_gen, 4, 3, torch.float64)
expect_value_error(lambda: cispo_policy_loss(_bad[0], _bad[1], _bad[2], _bad[3], epsilon_high=-1.0), "epsilon_high < 0")
expect_value_error(lambda: cispo_policy_loss(_bad[0], _bad[1], _bad[2][:3], _bad[3]), "advantages 长度不是 B*G")
expect_value_error(lambda: cispo_policy_loss(_bad[0], _bad[1], _bad[2], _bad[3], beta=-1.0), "beta < 0")
### END HIDDEN TESTS

# %% [markdown]
# ## 第 4 步：梯度在哪里消失
#
# 只看一个 token（一条只有 1 个有效 token 的回答，`β = 0`），把 `r` 从 0.3 扫到 2.2，画出损失对 `log π` 的
# 导数 `∂L/∂ℓ^θ`。因为 `∂r/∂ℓ^θ = r`，GRPO 未裁剪时导数是 `−A·r`，被裁剪时是 0；CISPO 处处是
# `−min(r, ε_high)·A`。下面的图直接用**你写的**两个函数加自动求导算出来（`ε = 0.2`，`ε_high = 5.0`）。

# %% nbgrader={"locked": true, "grade_id": "gradient_figure"}
def per_token_gradient(loss_fn, ratios, advantage, **kwargs):
    """d loss / d log pi for one-token completions, one completion per ratio (uses the learner's loss)."""
    n = ratios.numel()
    policy = torch.full((n, 1), -1.0, dtype=torch.float64, requires_grad=True)  # [N, 1]
    old = policy.detach() - torch.log(ratios.double()).view(n, 1)  # [N, 1]
    advantages = torch.full((n,), float(advantage), dtype=torch.float64)  # [N]
    mask = torch.ones(n, 1, dtype=torch.bool)  # [N, 1]
    loss = loss_fn(policy, old, advantages, mask, **kwargs) * n  # undo the mean over completions
    (grad,) = torch.autograd.grad(loss, policy)
    return grad.view(n)  # [N]


ratio_grid = torch.linspace(0.3, 2.2, 191, dtype=torch.float64)  # [N]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=False)
for ax, advantage in zip(axes, (1.0, -1.0)):
    g_grpo = per_token_gradient(grpo_policy_loss, ratio_grid, advantage, epsilon=0.2)
    g_cispo = per_token_gradient(cispo_policy_loss, ratio_grid, advantage, epsilon_high=5.0)
    vanished = (g_grpo == 0)
    ax.axvspan(0.8, 1.2, color="0.92", label="clip range [1-eps, 1+eps]")
    ax.plot(ratio_grid, g_cispo, color="tab:orange", lw=2.5, label="CISPO")
    ax.plot(ratio_grid, g_grpo, color="tab:blue", lw=1.8, ls="--", label="GRPO")
    ax.scatter(ratio_grid[vanished], g_grpo[vanished], s=6, color="tab:red", zorder=3, label="GRPO gradient = 0")
    ax.axhline(0.0, color="k", lw=0.6)
    ax.set_title(f"A = {advantage:+.0f}")
    ax.set_xlabel("ratio r = pi / pi_old")
    ax.set_ylabel("dL / d log pi")
    ax.legend(fontsize=8)
fig.tight_layout()
show_figure(fig)
for advantage in (1.0, -1.0):
    g = per_token_gradient(grpo_policy_loss, ratio_grid, advantage, epsilon=0.2)
    dead = ratio_grid[g == 0]
    print(f"A={advantage:+.0f}: GRPO 梯度为 0 的比率范围 [{dead.min():.2f}, {dead.max():.2f}]（网格上 {dead.numel()} 个点）")

# %% [markdown]
# 图里可以读出：`A > 0` 时 GRPO 只在 `r > 1+ε` 一侧“死掉”（已经足够提高这个 token 的概率，不再继续推），
# `A < 0` 时只在 `r < 1−ε` 一侧死掉；另一侧没有裁剪，梯度照常流动。CISPO 在整个范围内梯度都不为 0，
# 只是 `r > ε_high` 时权重封顶。
#
# **计算题（自动评分）。** 对下面 4 个单 token 情形（`ε = 0.2`，`ε_high = 5.0`，`β = 0`，批里只有这一条回答），
# 写出 `∂L/∂ℓ^θ` 的数值，填进 `gradient_answers`：键是情形编号，值是 `(GRPO 的导数, CISPO 的导数)`。
#
# | 情形 | A | r |
# | --- | --- | --- |
# | `"a"` | +1 | 1.5 |
# | `"b"` | −1 | 0.5 |
# | `"c"` | −1 | 1.5 |
# | `"d"` | +1 | 0.5 |

# %% nbgrader={"solution": true, "grade_id": "gradient_answers"}
gradient_answers = None  # 例如 {"a": (0.0, -1.0), ...}
### BEGIN SOLUTION
gradient_answers = {"a": (0.0, -1.5), "b": (0.0, 0.5), "c": (1.5, 1.5), "d": (-0.5, -0.5)}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_gradient_answers", "points": 2}
"""检查“梯度在哪里消失”的计算题：4 个情形的 GRPO / CISPO 导数（可见部分只检查格式）。"""
if gradient_answers is None:
    raise NotImplementedError("请先填写 gradient_answers")
assert isinstance(gradient_answers, dict) and set(gradient_answers) == {"a", "b", "c", "d"}, \
    "gradient_answers 应是键为 'a'、'b'、'c'、'd' 的字典"
for _key, _pair in gradient_answers.items():
    assert len(_pair) == 2 and all(isinstance(v, (int, float)) for v in _pair), \
        f"情形 {_key} 的答案应是两个数 (GRPO 导数, CISPO 导数)"
print("格式正确；数值由隐藏测试评分")
### BEGIN HIDDEN TESTS
from tools.grading import trusted as _h_trusted

_h_expected = {"a": (0.0, -1.5), "b": (0.0, 0.5), "c": (1.5, 1.5), "d": (-0.5, -0.5)}
for _key, (_g, _c) in _h_expected.items():
    _ans = gradient_answers[_key]
    assert _h_trusted("abs")(float(_ans[0]) - _g) < 1e-3, f"情形 {_key} 的 GRPO 导数不对"
    assert _h_trusted("abs")(float(_ans[1]) - _c) < 1e-3, f"情形 {_key} 的 CISPO 导数不对"
### END HIDDEN TESTS

# %% [markdown]
# ## 第 5 步：追踪实验（MiniMind trace lab）
#
# MiniMind 第 24 课的追踪实验：固定随机种子，构造 `B = 2` 个 prompt、每个 `G = 4` 条回答的平铺奖励，其中第 2 组
# 的奖励全部相同（“退化组”）；再构造旧策略、当前策略和 reference 的逐 token 对数概率与变长 mask，依次打印
# 中间量。要观察的是：
#
# - 每组 `advantages` 的均值接近 0；退化组的 `advantages` 全部约为 0（分子为 0，分母是 `0 + eps`）；
# - GRPO 与 CISPO 用的是**同一个**比率和**同一个** KL（`ratio_min`、`ratio_max`、`kl_mean` 与 `loss_type` 无关），
#   但两个损失的值不同。

# %% nbgrader={"locked": true, "grade_id": "trace_lab"}
def trace_grpo_cispo(seed=24, num_prompts=2, num_generations=4, max_len=6, beta=0.04):
    """MiniMind-style trace: print the intermediate tensors of one GRPO / CISPO loss computation."""
    gen = torch.Generator().manual_seed(seed)
    n = num_prompts * num_generations
    rewards = torch.round(torch.rand(n, generator=gen) * 100) / 100  # [B*G]
    rewards[num_generations:2 * num_generations] = 0.5  # a degenerate group: every reward equal
    old_logps = -torch.rand(n, max_len, generator=gen) * 2.0 - 0.1  # [B*G, T]
    policy_logps = old_logps + 0.3 * torch.randn(n, max_len, generator=gen)  # [B*G, T]
    ref_logps = old_logps + 0.1 * torch.randn(n, max_len, generator=gen)  # [B*G, T]
    lengths = torch.randint(2, max_len + 1, (n,), generator=gen)  # [B*G]
    completion_mask = torch.arange(max_len)[None, :] < lengths[:, None]  # [B*G, T]

    grouped_rewards = rewards.view(-1, num_generations)  # [B, G]
    group_mean = grouped_rewards.mean(dim=1)  # [B]
    group_std = grouped_rewards.std(dim=1, unbiased=False)  # [B]
    advantages = group_relative_advantages(rewards, num_generations)  # [B*G]
    ratio = torch.exp(policy_logps - old_logps)[completion_mask]  # [valid tokens]
    kl = token_kl_penalty(policy_logps, ref_logps)[completion_mask]  # [valid tokens]
    grpo_loss = grpo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon=0.2, beta=beta, ref_logps=ref_logps)
    cispo_loss = cispo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon_high=5.0, beta=beta, ref_logps=ref_logps)
    print("grouped_rewards =\n", grouped_rewards)
    print("group_mean =", group_mean)
    print("group_std =", group_std)
    print("advantages =", advantages)
    print("advantages 的组内均值 =", advantages.view(-1, num_generations).mean(dim=1))
    print("completion 长度 =", lengths.tolist())
    print(f"ratio_min = {ratio.min().item():.4f}")
    print(f"ratio_max = {ratio.max().item():.4f}")
    print(f"kl_mean = {kl.mean().item():.4f}")
    print(f"grpo_loss = {grpo_loss.item():.4f}")
    print(f"cispo_loss = {cispo_loss.item():.4f}")
    return {"grpo_loss": grpo_loss.item(), "cispo_loss": cispo_loss.item()}


trace = trace_grpo_cispo()

# %% [markdown]
# ## 第 6 步：损失家族 = 同一个逐 token 损失 + 不同的归约（TODO 3）
#
# 把 `[B*G, T]` 的 `per_token_loss` 变成标量，TRL 的 `loss_type` 给了四种归约（记 `m` 为 mask，`B*G` 为本地批的回答条数）：
#
# | `loss_type` | 归约 | 每个有效 token 的权重 |
# | --- | --- | --- |
# | `grpo` | 回答内 token 均值，再对回答求均值 | `1 / (B*G · n_i)`：与本回答的长度 `n_i` 成反比 |
# | `bnpo` | 本地批内所有有效 token 的均值：`Σ m·ℓ / Σ m` | `1 / Σ m`：本地批内一视同仁 |
# | `dr_grpo` | `Σ m·ℓ / (B*G · max_completion_length)` | 常数 `1 / (B*G · L_max)`（Dr. GRPO） |
# | `dapo` | `Σ m·ℓ / num_items_in_batch`：全局批（所有进程、整个梯度累积窗口）的 token 均值 | `1 / N_global`（DAPO） |
#
# TRL 里 `loss_type="cispo"` 的**归约与 `dapo` 相同**（除以 `num_items_in_batch`），这一点和 MiniMind 的
# `cispo_policy_loss`（按 `grpo` 归约）不同——第 9 步的核对会用到。你的归约器也接受 `"cispo"`，按 `dapo` 处理。
#
# 输入契约（违反时抛出中文 `ValueError`）：
# - `per_token_loss` 是二维张量，`completion_mask` 形状与它相同；
# - `loss_type` 是 `"grpo"`、`"bnpo"`、`"dr_grpo"`、`"dapo"`、`"cispo"` 之一；
# - `dr_grpo` 需要正整数 `max_completion_length`，且不小于 `T`（回答不可能比上限还长）；
# - `dapo` / `cispo` 需要 `num_items_in_batch`（数字或 0 维张量，`>= 0`），分母按 `max(num_items_in_batch, 1)` 计。

# %% nbgrader={"solution": true, "grade_id": "reduce_per_token_loss"}
def reduce_per_token_loss(per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None):
    """把 [B*G, T] 的逐 token 损失按 TRL 的 loss_type 归约成标量。

    loss_type:
        "grpo"           回答内有效 token 均值（token 数至少按 1 计），再对 B*G 条回答求均值
        "bnpo"           本地批所有有效 token 的均值（token 总数至少按 1 计）
        "dr_grpo"        有效 token 之和 / (B*G * max_completion_length)
        "dapo", "cispo"  有效 token 之和 / max(num_items_in_batch, 1)
    违反输入契约时抛出 ValueError（见上方列表）。
    """
    ### BEGIN SOLUTION
    if not (torch.is_tensor(per_token_loss) and per_token_loss.dim() == 2):
        raise ValueError("per_token_loss 必须是形状为 [B*G, T] 的二维张量")
    if not torch.is_tensor(completion_mask) or completion_mask.shape != per_token_loss.shape:
        raise ValueError(f"completion_mask 的形状必须与 per_token_loss 相同 {tuple(per_token_loss.shape)}")
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"未知的 loss_type：{loss_type!r}，可选 {LOSS_TYPES}")
    mask = completion_mask.to(per_token_loss.dtype)  # [B*G, T]
    masked = per_token_loss * mask  # [B*G, T]
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
        raise ValueError(f"{loss_type} 需要 num_items_in_batch（全局批的有效 token 数）")
    count = float(num_items_in_batch)
    if not count >= 0:
        raise ValueError(f"num_items_in_batch 必须 >= 0，实际为 {num_items_in_batch!r}")
    return masked.sum() / max(count, 1.0)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_reduce_per_token_loss", "points": 4}
"""检查 reduce_per_token_loss：四种归约在手算例子上的值、cispo 与 dapo 相同、输入契约（可见测试）。"""
from tools.grading import assert_close, expect_value_error

_ptl = torch.tensor([[1.0, 2.0, 3.0, 100.0], [4.0, 100.0, 100.0, 100.0]], dtype=torch.float64)  # 100 位于 padding
_m = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
_cases = {
    "grpo": ((1 + 2 + 3) / 3 + 4 / 1) / 2,
    "bnpo": (1 + 2 + 3 + 4) / 4,
    "dr_grpo": (1 + 2 + 3 + 4) / (2 * 8),
    "dapo": (1 + 2 + 3 + 4) / 20,
    "cispo": (1 + 2 + 3 + 4) / 20,
}
for _lt, _val in _cases.items():
    _got = reduce_per_token_loss(_ptl, _m, _lt, max_completion_length=8, num_items_in_batch=20)
    assert_close(_got, torch.tensor(_val, dtype=torch.float64), what=f"loss_type={_lt} 的归约")
expect_value_error(lambda: reduce_per_token_loss(_ptl, _m, "ppo"), "未知 loss_type")
expect_value_error(lambda: reduce_per_token_loss(_ptl, _m, "dr_grpo"), "dr_grpo 缺少 max_completion_length")
expect_value_error(lambda: reduce_per_token_loss(_ptl, _m, "dapo"), "dapo 缺少 num_items_in_batch")
expect_value_error(lambda: reduce_per_token_loss(_ptl, _m[:, :2], "grpo"), "mask 形状不一致")
print("reduce_per_token_loss 可见测试通过")
### BEGIN HIDDEN TESTS
def _h_ref_reduce(ptl, mask, loss_type, lmax, nitems):
    ptl, mask = ptl.double(), mask.double()
    n_rows = ptl.shape[0]
    total = sum(float((ptl[i] * mask[i]).sum().item()) for i in range(n_rows))
    if loss_type == "grpo":
        per_row = []
        for i in range(n_rows):
            c = float(mask[i].sum().item())
            per_row.append(float((ptl[i] * mask[i]).sum().item()) / (c if c >= 1 else 1.0))
        return sum(per_row) / n_rows
    if loss_type == "bnpo":
        c = float(mask.sum().item())
        return total / (c if c >= 1 else 1.0)
    if loss_type == "dr_grpo":
        return total / (n_rows * lmax)
    return total / (nitems if nitems >= 1 else 1.0)


_h_gen = torch.Generator().manual_seed(3005)
_H_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo")
_h_seen = {lt: [] for lt in _H_LOSS_TYPES}
for _h_dtype, _h_n, _h_t in [(torch.float64, 5, 7), (torch.float32, 9, 12), (torch.float64, 1, 1), (torch.float32, 16, 30)]:
    _hptl = (torch.randn(_h_n, _h_t, generator=_h_gen, dtype=torch.float64) * 2.0).to(_h_dtype)
    _hl = torch.randint(0, _h_t + 1, (_h_n,), generator=_h_gen)
    _hl[0] = max(1, int(_hl[0]))
    _hm = torch.arange(_h_t)[None, :] < _hl[:, None]
    _lmax = _h_t + int(torch.randint(0, 5, (1,), generator=_h_gen))
    _nitems = int(_hm.sum()) + int(torch.randint(0, 40, (1,), generator=_h_gen))
    _tol = 1e-9 if _h_dtype == torch.float64 else 2e-5
    for _lt in _H_LOSS_TYPES:
        for _nitems_arg in (_nitems, torch.tensor(_nitems)):
            _leaf = _hptl.clone().requires_grad_(True)
            _got = reduce_per_token_loss(_leaf, _hm.long() if _h_n % 2 else _hm, _lt, max_completion_length=_lmax, num_items_in_batch=_nitems_arg)
            assert _got.dim() == 0, f"{_lt} 归约应返回标量"
            assert_close(_got, torch.tensor(_h_ref_reduce(_hptl, _hm, _lt, _lmax, _nitems), dtype=torch.float64),
                         atol=_tol, rtol=_tol, what=f"loss_type={_lt} 的归约（{_h_dtype}, {_h_n}x{_h_t}）")
            _got.backward()
            _probe = torch.zeros(_h_n, _h_t, dtype=torch.float64)
            for _i in range(_h_n):
                for _t in range(_h_t):
                    if _hm[_i, _t]:
                        _c = float(_hm[_i].sum())
                        _probe[_i, _t] = {"grpo": 1.0 / (_h_n * _c), "bnpo": 1.0 / float(_hm.sum()),
                                          "dr_grpo": 1.0 / (_h_n * _lmax)}.get(_lt, 1.0 / max(_nitems, 1))
            assert_close(_leaf.grad, _probe, atol=_tol, rtol=_tol, what=f"loss_type={_lt} 下每个 token 的梯度权重")
        _h_seen[_lt].append(float(_got.item()))
for _lt, _vals in _h_seen.items():
    assert len(set(round(v, 7) for v in _vals)) == len(_vals), f"{_lt}：不同输入给出了相同的结果"
# an all-masked batch: every reduction is 0 (counts clamp to 1)
_z = torch.randn(3, 4, dtype=torch.float64)
_zm = torch.zeros(3, 4, dtype=torch.bool)
for _lt in _H_LOSS_TYPES:
    assert_close(reduce_per_token_loss(_z, _zm, _lt, max_completion_length=4, num_items_in_batch=0), torch.tensor(0.0, dtype=torch.float64),
                 what=f"全部被 mask 时 {_lt} 的归约")
expect_value_error(lambda: reduce_per_token_loss(_z, _zm, "dr_grpo", max_completion_length=3), "max_completion_length 小于 T")
expect_value_error(lambda: reduce_per_token_loss(_z, _zm, "dr_grpo", max_completion_length=0), "max_completion_length 不是正整数")
expect_value_error(lambda: reduce_per_token_loss(_z, _zm, "cispo"), "cispo 缺少 num_items_in_batch")
expect_value_error(lambda: reduce_per_token_loss(_z, _zm, "dapo", num_items_in_batch=-1), "num_items_in_batch < 0")
expect_value_error(lambda: reduce_per_token_loss(_z[0], _zm[0], "grpo"), "per_token_loss 不是二维")
expect_value_error(lambda: reduce_per_token_loss(_z, _zm, "GRPO"), "loss_type 大小写错误")
### END HIDDEN TESTS

# %% [markdown]
# ### 长度偏置：一条 3 token 的回答和一条 30 token 的回答
#
# 设一个批里只有两条回答，长度分别为 3 和 30，`max_completion_length = 32`，每个 token 的损失相同。用自动求导
# 读出 `∂L/∂per_token_loss`——这就是每个 token 在梯度里的权重——再把一条回答内的权重加起来。
# `grpo` 让**两条回答各占一半**，于是短回答的每个 token 权重是长回答的 10 倍；`bnpo`、`dapo` 让**每个 token**
# 一样重，长回答整体的权重是短回答的 10 倍；`dr_grpo` 也让每个 token 一样重，只是除以常数 `2 × 32`，
# 权重之和不是 1。
#
# 这就是“长度偏置”：在 `grpo` 下，正优势的短回答每个 token 被推得更用力，负优势的长回答每个 token 被罚得更轻，
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
for lt in ("grpo", "bnpo", "dr_grpo", "dapo"):
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
# 组成。TRL 对 `bnpo` 在每个微批内求 token 均值、再除以累积步数；对 `dapo` 则让每个微批都除以**同一个**全局
# token 数 `num_items_in_batch`。把 3 token 和 30 token 的回答放进两个不同的微批：

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
# ## 第 7 步：clip-higher 与 GSPO 的序列级比率（TODO 4、TODO 5）
#
# **clip-higher（DAPO）。** 把对称的 `clip(r, 1−ε, 1+ε)` 换成上下不同的半径
# `clip(r, 1−ε_low, 1+ε_high)`，DAPO 推荐 `ε_low = 0.2`、`ε_high = 0.28`。上界放宽，让正优势的低概率 token
# 有更大的上升空间，缓解熵塌缩。TRL 里 `epsilon` 就是 `ε_low`，`epsilon_high` 不设时等于 `epsilon`。
#
# **GSPO 的序列级比率。** `importance_sampling_level="sequence"` 时，一条回答只有一个比率：对数比率在有效 token
# 上的均值再取指数（几何平均）：
#
# $$
# s_i = \exp\Big(\frac{\sum_t m_{i,t}(\ell^{\theta}_{i,t} - \ell^{\text{old}}_{i,t})}{\max(1, \sum_t m_{i,t})}\Big)
# $$
#
# 裁剪作用在 `s_i` 上，于是要么整条回答被裁剪，要么整条都不裁剪；单个 token 的比率再大也不会单独“死掉”。
# GSPO 论文用很小的裁剪半径（例如 `ε_low = 3e-4`，`ε_high = 4e-4`），因为几何平均比单个 token 的比率稳定得多。
#
# **TODO 4 `importance_ratio`**：`"token"` 返回 `[B*G, T]` 的 `exp(policy − old)`；`"sequence"` 返回
# `[B*G, 1]` 的 `s_i`（只在有效 token 上取均值，token 数至少按 1 计）；其他取值抛出 `ValueError`；
# 三个张量形状必须相同（否则 `ValueError`）。
#
# **TODO 5 `per_token_policy_loss`**：返回归约之前的 `[B*G, T]` 逐 token 损失（序列级时把每条回答的值广播到
# 它的 `T` 个位置），比率用 `importance_ratio`：
# - `loss_type` 为 `"grpo"`、`"bnpo"`、`"dr_grpo"`、`"dapo"`：`−min(r·A, clip(r, 1−ε_low, 1+ε_high)·A)`；
# - `loss_type == "cispo"`：`−sg(min(r, ε_high))·A·ℓ^θ`（此时 `ε_high` 是绝对上限，调用方要自己传 5.0 这样的值）；
# - `beta != 0` 时加 `beta * token_kl_penalty(policy_logps, ref_logps)`（KL 永远是 token 级的）；
# - 契约：`check_policy_inputs(...)`；`0 <= epsilon_low < 1`；`epsilon_high >= 0`（`cispo` 时 `> 0`）；
#   未知 `loss_type` 或 `importance_sampling_level` 抛出 `ValueError`。

# %% nbgrader={"solution": true, "grade_id": "importance_ratio"}
def importance_ratio(policy_logps, old_logps, completion_mask, importance_sampling_level="token"):
    """重要性比率。"token" -> [B*G, T] 的 exp(policy - old)；"sequence" -> [B*G, 1] 的 exp(有效 token 上对数比率的均值)。"""
    ### BEGIN SOLUTION
    if not (torch.is_tensor(policy_logps) and policy_logps.dim() == 2):
        raise ValueError("policy_logps 必须是形状为 [B*G, T] 的二维张量")
    for name, value in (("old_logps", old_logps), ("completion_mask", completion_mask)):
        if not torch.is_tensor(value) or value.shape != policy_logps.shape:
            raise ValueError(f"{name} 的形状必须与 policy_logps 相同 {tuple(policy_logps.shape)}")
    log_ratio = policy_logps - old_logps  # [B*G, T]
    if importance_sampling_level == "token":
        return torch.exp(log_ratio)  # [B*G, T]
    if importance_sampling_level == "sequence":
        mask = completion_mask.to(log_ratio.dtype)  # [B*G, T]
        mean_log_ratio = (log_ratio * mask).sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1.0)  # [B*G, 1]
        return torch.exp(mean_log_ratio)  # [B*G, 1]
    raise ValueError(f"importance_sampling_level 只能是 'token' 或 'sequence'，实际为 {importance_sampling_level!r}")
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_importance_ratio", "points": 3}
"""检查 importance_ratio：token 级比率、序列级几何平均（只看有效 token）、形状与输入契约（可见测试）。"""
from tools.grading import assert_close, expect_value_error

_p = torch.tensor([[0.2, -0.4, 5.0], [0.3, 0.3, 0.3]], dtype=torch.float64)
_o = torch.zeros(2, 3, dtype=torch.float64)
_m = torch.tensor([[1, 1, 0], [1, 1, 1]])
assert_close(importance_ratio(_p, _o, _m), _p.exp(), what="token 级比率")
assert_close(importance_ratio(_p, _o, _m, "sequence"), torch.tensor([[math.exp(-0.1)], [math.exp(0.3)]], dtype=torch.float64),
             what="序列级比率（padding 位置的 5.0 不应计入）")
expect_value_error(lambda: importance_ratio(_p, _o, _m, "segment"), "未知 importance_sampling_level")
expect_value_error(lambda: importance_ratio(_p, _o[:1], _m), "old_logps 形状不一致")
print("importance_ratio 可见测试通过")
### BEGIN HIDDEN TESTS
def _h_case(gen, n, t, dtype, spread=0.9, empty_row=False):
    old = -torch.rand(n, t, generator=gen, dtype=torch.float64) * 3.0 - 0.05
    policy = old + (torch.rand(n, t, generator=gen, dtype=torch.float64) * 2.0 - 1.0) * spread
    ref = old + torch.randn(n, t, generator=gen, dtype=torch.float64) * 0.3
    adv = torch.randn(n, generator=gen, dtype=torch.float64)
    lengths = torch.randint(1, t + 1, (n,), generator=gen)
    mask = torch.arange(t)[None, :] < lengths[:, None]
    if empty_row:
        mask[0] = False
    return policy.to(dtype), old.to(dtype), adv.to(dtype), mask, ref.to(dtype)


_h_gen = torch.Generator().manual_seed(3006)
_h_seen = []
for _h_dtype, _h_n, _h_t in [(torch.float64, 4, 6), (torch.float32, 7, 11), (torch.float64, 3, 1), (torch.float32, 12, 25)]:
    _hp, _ho, _ha, _hm, _hr = _h_case(_h_gen, _h_n, _h_t, _h_dtype, empty_row=(_h_n == 7))
    _tol = 1e-9 if _h_dtype == torch.float64 else 2e-5
    _tok = importance_ratio(_hp, _ho, _hm, "token")
    assert tuple(_tok.shape) == (_h_n, _h_t), f"token 级比率形状应为 {(_h_n, _h_t)}"
    assert_close(_tok, (_hp.double() - _ho.double()).exp(), atol=_tol, rtol=_tol, what="token 级比率")
    _leaf = _hp.clone().requires_grad_(True)
    _seq = importance_ratio(_leaf, _ho, _hm.float() if _h_n % 2 else _hm, "sequence")
    assert tuple(_seq.shape) == (_h_n, 1), f"序列级比率形状应为 {(_h_n, 1)}，实际 {tuple(_seq.shape)}"
    _exp_rows = []
    for _i in range(_h_n):
        _c = float(_hm[_i].sum())
        _exp_rows.append(math.exp(float(((_hp[_i].double() - _ho[_i].double()) * _hm[_i].double()).sum()) / (_c if _c >= 1 else 1.0)))
    _expected = torch.tensor(_exp_rows, dtype=torch.float64).view(_h_n, 1)
    assert_close(_seq, _expected, atol=_tol, rtol=_tol, what="序列级比率")
    _seq.sum().backward()
    _lens = _hm.double().sum(dim=1, keepdim=True).clamp(min=1.0)
    assert_close(_leaf.grad, _expected * _hm.double() / _lens, atol=_tol, rtol=_tol, what="序列级比率的梯度")
    _h_seen.append(_seq.detach().sum().item())
assert len(set(round(v, 7) for v in _h_seen)) == len(_h_seen), "不同输入给出了相同的序列级比率"
expect_value_error(lambda: importance_ratio(_hp, _ho, _hm[:, :1], "sequence"), "mask 形状不一致")
expect_value_error(lambda: importance_ratio(_hp[0], _ho[0], _hm[0]), "policy_logps 不是二维")
### END HIDDEN TESTS

# %% nbgrader={"solution": true, "grade_id": "per_token_policy_loss"}
def per_token_policy_loss(policy_logps, old_logps, advantages, completion_mask, loss_type="grpo", epsilon_low=0.2,
                          epsilon_high=0.28, importance_sampling_level="token", beta=0.0, ref_logps=None):
    """损失家族归约之前的逐 token 损失，形状 [B*G, T]。

    loss_type 为 "grpo"/"bnpo"/"dr_grpo"/"dapo"：-min(r*A, clip(r, 1-epsilon_low, 1+epsilon_high)*A)；
    loss_type 为 "cispo"：-detach(min(r, epsilon_high)) * A * policy_logps（epsilon_high 是绝对上限）；
    r 来自 importance_ratio(..., importance_sampling_level)；beta != 0 时加 beta * token_kl_penalty。
    违反输入契约时抛出 ValueError。
    """
    ### BEGIN SOLUTION
    check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta=beta, ref_logps=ref_logps)
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"未知的 loss_type：{loss_type!r}，可选 {LOSS_TYPES}")
    if not 0.0 <= epsilon_low < 1.0:
        raise ValueError(f"epsilon_low 必须满足 0 <= epsilon_low < 1，实际为 {epsilon_low}")
    if epsilon_high < 0 or (loss_type == "cispo" and epsilon_high <= 0):
        raise ValueError(f"epsilon_high 必须 >= 0（cispo 时 > 0），实际为 {epsilon_high}")
    ratio = importance_ratio(policy_logps, old_logps, completion_mask, importance_sampling_level)  # [B*G, T] or [B*G, 1]
    adv = advantages.unsqueeze(1)  # [B*G, 1]
    if loss_type == "cispo":
        weight = torch.clamp(ratio, max=epsilon_high).detach()  # [B*G, T] or [B*G, 1]
        per_token_loss = -weight * adv * policy_logps  # [B*G, T]
    else:
        clipped = torch.clamp(ratio, 1.0 - epsilon_low, 1.0 + epsilon_high)  # [B*G, T] or [B*G, 1]
        per_token_loss = -torch.minimum(ratio * adv, clipped * adv)  # [B*G, T] or [B*G, 1]
        per_token_loss = per_token_loss.expand(policy_logps.shape)  # [B*G, T]
    if beta != 0.0:
        per_token_loss = per_token_loss + beta * token_kl_penalty(policy_logps, ref_logps)  # [B*G, T]
    return per_token_loss
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_per_token_policy_loss", "points": 4}
"""检查 per_token_policy_loss：clip-higher 的上下边界、CISPO 分支、序列级比率的广播、KL 与契约（可见测试）。"""
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
expect_value_error(lambda: per_token_policy_loss(_p, _o, torch.tensor([1.0]), _m, "ppo"), "未知 loss_type")
expect_value_error(lambda: per_token_policy_loss(_p, _o, torch.tensor([1.0]), _m, "grpo", epsilon_low=1.0), "epsilon_low 不在 [0, 1)")
expect_value_error(lambda: per_token_policy_loss(_p, _o, torch.tensor([1.0]), _m, "cispo", epsilon_high=0.0), "cispo 的 epsilon_high <= 0")
print("per_token_policy_loss 可见测试通过")
### BEGIN HIDDEN TESTS
def _h_case(gen, n, t, dtype, spread=0.9, empty_row=False):
    old = -torch.rand(n, t, generator=gen, dtype=torch.float64) * 3.0 - 0.05
    policy = old + (torch.rand(n, t, generator=gen, dtype=torch.float64) * 2.0 - 1.0) * spread
    ref = old + torch.randn(n, t, generator=gen, dtype=torch.float64) * 0.3
    adv = torch.randn(n, generator=gen, dtype=torch.float64)
    lengths = torch.randint(1, t + 1, (n,), generator=gen)
    mask = torch.arange(t)[None, :] < lengths[:, None]
    if empty_row:
        mask[0] = False
    return policy.to(dtype), old.to(dtype), adv.to(dtype), mask, ref.to(dtype)


def _h_ref_per_token(policy, old, adv, mask, loss_type, el, eh, level, beta, ref):
    policy, old, adv, maskd = policy.double(), old.double(), adv.double(), mask.double()
    log_ratio = policy - old
    if level == "sequence":
        counts = maskd.sum(dim=1, keepdim=True)
        counts = torch.where(counts < 1, torch.ones_like(counts), counts)
        r = ((log_ratio * maskd).sum(dim=1, keepdim=True) / counts).exp().expand_as(policy)
    else:
        r = log_ratio.exp()
    a = adv[:, None].expand_as(policy)
    if loss_type == "cispo":
        w = r.detach()
        w = torch.where(w > eh, torch.full_like(w, eh), w)
        out = -(w * a * policy)
    else:
        c = torch.where(r < 1 - el, torch.full_like(r, 1 - el), torch.where(r > 1 + eh, torch.full_like(r, 1 + eh), r))
        out = -torch.where(r * a <= c * a, r * a, c * a)
    if beta:
        d = ref.double() - policy
        out = out + beta * (d.exp() - d - 1.0)
    return out


_h_gen = torch.Generator().manual_seed(3007)
_h_seen = []
for _h_dtype, _h_n, _h_t, _lt, _el, _eh, _lvl, _h_beta in [
    (torch.float64, 6, 8, "dapo", 0.2, 0.28, "token", 0.0),
    (torch.float32, 8, 5, "grpo", 0.2, 0.28, "token", 0.04),
    (torch.float64, 5, 9, "cispo", 0.2, 5.0, "token", 0.0),
    (torch.float32, 6, 7, "cispo", 0.2, 1.5, "token", 0.1),
    (torch.float64, 7, 10, "grpo", 3e-4, 4e-4, "sequence", 0.0),
    (torch.float64, 9, 6, "bnpo", 0.2, 0.28, "sequence", 0.05),
    (torch.float64, 6, 6, "cispo", 0.2, 1.2, "sequence", 0.0),
    (torch.float32, 10, 12, "dr_grpo", 0.1, 0.3, "token", 0.0),
]:
    _hp, _ho, _ha, _hm, _hr = _h_case(_h_gen, _h_n, _h_t, _h_dtype, spread=2.0, empty_row=(_h_n == 6))
    _tol = 1e-9 if _h_dtype == torch.float64 else 3e-5
    _leaf = _hp.clone().requires_grad_(True)
    _got = per_token_policy_loss(_leaf, _ho, _ha, _hm, _lt, epsilon_low=_el, epsilon_high=_eh,
                                 importance_sampling_level=_lvl, beta=_h_beta, ref_logps=_hr if _h_beta else None)
    assert tuple(_got.shape) == (_h_n, _h_t), f"per_token_policy_loss 应返回 {(_h_n, _h_t)}，实际 {tuple(_got.shape)}"
    _refp = _hp.double().clone().requires_grad_(True)
    _exp = _h_ref_per_token(_refp, _ho, _ha, _hm, _lt, _el, _eh, _lvl, _h_beta, _hr)
    assert_close(_got * _hm, _exp * _hm, atol=_tol, rtol=_tol, what=f"{_lt}/{_lvl} 的逐 token 损失")
    _wgt = torch.rand(_h_n, _h_t, generator=_h_gen, dtype=torch.float64) * _hm
    (_got.double() * _wgt).sum().backward()
    (_exp * _wgt).sum().backward()
    assert_close(_leaf.grad, _refp.grad, atol=_tol, rtol=_tol, what=f"{_lt}/{_lvl} 的逐 token 损失的梯度")
    _h_seen.append((_got.detach() * _hm).sum().item())
assert len(set(round(v, 6) for v in _h_seen)) == len(_h_seen), "不同输入给出了相同的结果"
expect_value_error(lambda: per_token_policy_loss(_hp, _ho, _ha, _hm, "grpo", importance_sampling_level="seq"), "未知 importance_sampling_level")
expect_value_error(lambda: per_token_policy_loss(_hp, _ho, _ha, _hm, "grpo", epsilon_high=-0.1), "epsilon_high < 0")
expect_value_error(lambda: per_token_policy_loss(_hp, _ho, _ha, _hm, "grpo", epsilon_low=-0.1), "epsilon_low < 0")
expect_value_error(lambda: per_token_policy_loss(_hp, _ho, _ha[:-1], _hm, "grpo"), "advantages 长度不是 B*G")
expect_value_error(lambda: per_token_policy_loss(_hp, _ho, _ha, _hm, "grpo", beta=0.1), "beta > 0 但没有 ref_logps")
### END HIDDEN TESTS

# %% [markdown]
# 有了逐 token 损失和归约器，整个家族就是两者的组合。下面的 `grpo_family_loss` 是**只读**的组合函数（不评分），
# 它的参数名与 TRL 的 `GRPOConfig` 一致，第 9 步的核对直接调用它。再顺手确认两件事：
# 对称裁剪 + `grpo` 归约就是你在 TODO 1 写的 `grpo_policy_loss`；CISPO 逐 token 损失 + `grpo` 归约就是 TODO 2 的
# `cispo_policy_loss`，而换成 TRL 的 `cispo` 归约（全局 token 均值）后，变长批上的数值会不同。
# 最后看一眼 GSPO：同一批数据在 token 级与序列级下，被裁剪的 token 比例。

# %% nbgrader={"locked": true, "grade_id": "family_demo"}
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
          f"TRL 的 cispo 归约（全局 token 均值）{cispo_trl.item():.6f}")
    for lt in ("grpo", "bnpo", "dr_grpo", "dapo"):
        value = grpo_family_loss(policy, old, adv, mask, lt, max_completion_length=t, num_items_in_batch=items)
        print(f"loss_type={lt:<8} clip-higher (0.2, 0.28) 的损失 = {value.item():+.6f}")
    token_r = importance_ratio(policy, old, mask, "token")  # [B*G, T]
    seq_r = importance_ratio(policy, old, mask, "sequence").expand(n, t)  # [B*G, T]
    for name, r, lo, hi in (("token 级, ε=(0.2, 0.28)", token_r, 0.8, 1.28), ("序列级, ε=(3e-4, 4e-4)", seq_r, 1 - 3e-4, 1 + 4e-4),
                            ("序列级, ε=(0.2, 0.28)", seq_r, 0.8, 1.28)):
        outside = ((r < lo) | (r > hi)) & mask
        print(f"{name}：比率落在裁剪区间外的有效 token 比例 {outside.sum().item() / items:.2f}")


family_demo()

# %% [markdown]
# ## 第 8 步：本节检查（9 题）
#
# 前 8 题对应 MiniMind 第 24 课的检查清单（那份清单列了 8 题，这里补了第 9 题，考本课的损失家族）。
# 选择题和数值题自动评分；简答题由老师按要点人工评分（nbgrader 的 manual grading），用自己的话写 2～4 句即可。

# %% [markdown] nbgrader={"solution": true, "grade": true, "grade_id": "q1_no_critic", "points": 2}
# **Q1（简答）GRPO 为什么可以不训练 critic？**
#
# ### BEGIN SOLUTION
# 参考要点：PPO 的 critic 只是为了给优势提供一个基线 `V(s)`。GRPO 对同一个 prompt 采样 `G` 条回答，用这组回答
# 奖励的均值（再除以组内标准差）当基线：比同组平均好的回答优势为正、差的为负。基线来自同题的其他样本，
# 不需要额外的价值网络、value loss 和 GAE；代价是每个 prompt 要多采样几条回答，而且优势只有序列级。
# ### END SOLUTION

# %% [markdown]
# **Q2（数值）** 平铺的 `rewards` 用 `rewards.view(-1, G)` 分组，这依赖于同一个 prompt 的回答连续排列。
# 若 `B = 3`、`G = 4`，第 `i = 1` 个 prompt 的第 `j = 2` 条回答（都从 0 开始数）在平铺张量里的下标是多少？
# 把整数赋给 `q2_flat_index`。

# %% nbgrader={"solution": true, "grade_id": "q2_answer"}
q2_flat_index = None
### BEGIN SOLUTION
q2_flat_index = 6
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_q2", "points": 1}
"""检查 Q2：平铺布局中 (i=1, j=2) 的下标。"""
if q2_flat_index is None:
    raise NotImplementedError("请先回答 Q2")
assert isinstance(q2_flat_index, int), "q2_flat_index 应是整数"
### BEGIN HIDDEN TESTS
assert q2_flat_index == 1 * 4 + 2, "下标是 i * G + j"
### END HIDDEN TESTS

# %% [markdown]
# **Q3（选择）** 若同一组的 `G` 个奖励完全相同，按 `(R − mean) / (std + 1e-4)` 计算的优势会怎样？
# 把选项字母赋给 `q3_choice`。
#
# - A. 全部是 0：分子为 0，分母是 `1e-4`，这一组对策略梯度（β = 0 时）没有贡献
# - B. 全部是 NaN：标准差为 0，发生除零
# - C. 一半 +1、一半 −1
# - D. 等于奖励本身的大小

# %% nbgrader={"solution": true, "grade_id": "q3_answer"}
q3_choice = None
### BEGIN SOLUTION
q3_choice = "A"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_q3", "points": 1}
"""检查 Q3：退化组的优势。"""
if q3_choice is None:
    raise NotImplementedError("请先回答 Q3")
assert q3_choice in ("A", "B", "C", "D"), "q3_choice 应是 'A'、'B'、'C'、'D' 之一"
### BEGIN HIDDEN TESTS
assert q3_choice == "A", "分子为 0、分母为 eps：优势为 0，不是 NaN"
### END HIDDEN TESTS

# %% [markdown] nbgrader={"solution": true, "grade": true, "grade_id": "q4_broadcast", "points": 2}
# **Q4（简答）** 为什么 `advantages.unsqueeze(1)` 可以乘到这条回答的每个 token 上？这样做意味着什么？
#
# ### BEGIN SOLUTION
# 参考要点：GRPO 的优势是序列级的——奖励只对整条回答打一次分，组内标准化后每条回答一个数，形状 `[B*G]`。
# `unsqueeze(1)` 把它变成 `[B*G, 1]`，按广播规则复制到 `[B*G, T]` 的每个 token 位置：同一条回答的所有 token 共享
# 同一份“功劳/过错”，没有 critic 那样的逐 token 信用分配；padding 之后的位置再由 mask 去掉。
# ### END SOLUTION

# %% [markdown]
# **Q5（选择）** `per_token_kl = exp(ref − policy) − (ref − policy) − 1` 约束的是什么？把字母赋给 `q5_choice`。
#
# - A. 当前策略与采样时旧策略的距离（这由比率和裁剪负责）
# - B. 当前策略与冻结的 reference（通常是 SFT 模型）的距离，按 token 计、非负
# - C. 当前策略与奖励模型的距离
# - D. 新旧两次采样的奖励差

# %% nbgrader={"solution": true, "grade_id": "q5_answer"}
q5_choice = None
### BEGIN SOLUTION
q5_choice = "B"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_q5", "points": 1}
"""检查 Q5：reference KL 约束的对象。"""
if q5_choice is None:
    raise NotImplementedError("请先回答 Q5")
assert q5_choice in ("A", "B", "C", "D"), "q5_choice 应是 'A'、'B'、'C'、'D' 之一"
### BEGIN HIDDEN TESTS
assert q5_choice == "B", "KL 项比较的是 policy 与冻结的 reference"
### END HIDDEN TESTS

# %% [markdown] nbgrader={"solution": true, "grade": true, "grade_id": "q6_ppo_similarity", "points": 2}
# **Q6（简答）** GRPO 的损失和 PPO 的策略损失哪里相似、哪里不同？
#
# ### BEGIN SOLUTION
# 参考要点：相同之处——都用新旧策略的逐 token 比率 `r = π_θ/π_old` 做重要性采样，都用
# `min(r·A, clip(r, 1−ε, 1+ε)·A)` 的保守（悲观）裁剪目标限制一次更新走多远，都需要采样时保存的 old logprob。
# 不同之处——GRPO 的优势来自组内相对奖励（序列级、广播到 token），PPO 的来自 critic + GAE（token 级）；
# GRPO 没有 value loss，通常把 reference KL 作为损失里的一项，而不是像经典 RLHF-PPO 那样并进奖励。
# ### END SOLUTION

# %% [markdown] nbgrader={"solution": true, "grade": true, "grade_id": "q7_cispo_detach", "points": 2}
# **Q7（简答）** CISPO 为什么要对 `clamped_ratio` 调用 `.detach()`？
#
# ### BEGIN SOLUTION
# 参考要点：CISPO 想让截断后的比率只当作一个**固定的重要性权重**，梯度全部经过 `log π`：
# `∂L/∂ℓ = −min(r, ε_high)·A`，即使比率超过上限，梯度也只是被封顶而不会消失（第 4 步的图）。如果不 detach，
# 未截断时会多出一条经过 `r` 本身的梯度（导数变成 `−r·A·(1+ℓ)`，依赖 logprob 的绝对大小，甚至可能变号），
# 截断时这条路径又变成 0，目标就不再是“以封顶比率加权的策略梯度”。
# ### END SOLUTION

# %% [markdown]
# **Q8（多选）** 在 MiniMind 里把 `loss_type` 从 `"grpo"` 改成 `"cispo"`，下列哪些步骤**不变**？
# 把字母组成的集合赋给 `q8_unchanged`，例如 `{"a", "b"}`。
#
# - a. 每个 prompt 采样 `num_generations` 条回答
# - b. 奖励的计算
# - c. 组内相对优势
# - d. completion mask（截到第一个 EOS）
# - e. 比率 `exp(policy − old)`
# - f. reference KL
# - g. 策略项的写法
# - h. 归约：先回答内有效 token 均值，再对回答求均值

# %% nbgrader={"solution": true, "grade_id": "q8_answer"}
q8_unchanged = None
### BEGIN SOLUTION
q8_unchanged = {"a", "b", "c", "d", "e", "f", "h"}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_q8", "points": 1}
"""检查 Q8：切换 loss_type 时不变的步骤。"""
if q8_unchanged is None:
    raise NotImplementedError("请先回答 Q8")
assert isinstance(q8_unchanged, (set, frozenset)) and q8_unchanged <= set("abcdefgh"), "q8_unchanged 应是 'a'～'h' 组成的集合"
### BEGIN HIDDEN TESTS
assert set(q8_unchanged) == set("abcdefh"), "只有策略项（g）变了；MiniMind 两个分支的归约相同"
### END HIDDEN TESTS

# %% [markdown]
# **Q9（数值，本课补充）** 一个批里有一条 3 token 和一条 30 token 的回答，每个 token 的损失相同，没有梯度累积。
# 30 token 回答里**单个 token** 的梯度权重是 3 token 回答里单个 token 的多少倍？分别给出 `loss_type="grpo"`
# 与 `loss_type="dapo"` 的答案，赋给 `q9_ratio = {"grpo": ..., "dapo": ...}`。

# %% nbgrader={"solution": true, "grade_id": "q9_answer"}
q9_ratio = None
### BEGIN SOLUTION
q9_ratio = {"grpo": 0.1, "dapo": 1.0}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_q9", "points": 1}
"""检查 Q9：grpo 与 dapo 归约下长短回答的单 token 权重之比。"""
if q9_ratio is None:
    raise NotImplementedError("请先回答 Q9")
assert isinstance(q9_ratio, dict) and set(q9_ratio) == {"grpo", "dapo"}, "q9_ratio 应是键为 'grpo'、'dapo' 的字典"
### BEGIN HIDDEN TESTS
from tools.grading import trusted as _h_trusted

assert _h_trusted("abs")(float(q9_ratio["grpo"]) - 0.1) < 1e-6, "grpo：每条回答总权重相同，单 token 权重与长度成反比（3/30）"
assert _h_trusted("abs")(float(q9_ratio["dapo"]) - 1.0) < 1e-6, "dapo：全局 token 均值，每个 token 权重相同"
### END HIDDEN TESTS

# %% [markdown]
# ## 第 9 步：框架一致性核对（TRL，PT-CPU）
#
# 这一节不再写新代码，而是把**你在本课写的函数**放到 TRL 的 `GRPOTrainer` 内部路径旁边逐项核对。
# 核对是为 `trl==1.16.0` 写的（`TRL_VERSION_WRITTEN_FOR`）：它调用两个**私有**方法，不启动完整的 Trainer、
# 不加载模型，只用一个记录属性读取的替身对象提供这两个方法读到的配置和状态。
#
# | 核对项 | 本课 | TRL 路径 | 通过条件 |
# | --- | --- | --- | --- |
# | 奖励函数 | 正确性与整数格式两个奖励函数 | `GRPOTrainer._calculate_rewards` | 每个函数一列；`None` 变成 NaN；数据集的额外列（`expected_answer`）传给奖励函数 |
# | 奖励合并 | 权重 `[0.9, 0.1]` 加权求和，忽略 NaN；全部缺失的行保持 NaN | TRL 在 `_generate_and_score_completions` 里的同一规则（此处在本地按该规则复算，因为那个方法需要真实生成） | 可评分行得到预期总分，不可评分行是 NaN |
# | 优势约定 | MiniMind：总体标准差 + 1e-4 | `trl.trainer.utils.nanstd`：Bessel 校正（除以 `n−1`） | 记录两种约定的差别；**两边喂同一份优势** |
# | 损失 | `grpo_family_loss` / `grpo_policy_loss` / `cispo_policy_loss` | `GRPOTrainer._compute_loss`，`loss_type` ∈ {`grpo`, `bnpo`, `dr_grpo`, `dapo`, `cispo`}，外加 `importance_sampling_level="sequence"` | 损失值与对 `policy_logps` 的梯度都在 `1e-6` 内一致，且输入上裁剪确实发生 |
#
# 需要显式处理的 TRL 1.16.0 事实（下面的代码会逐项测量，而不是照抄）：
#
# - `GRPOConfig.use_bias_correction_kl` 默认是 `True`：它把 KL 项乘以比率（DeepSeek-V3.2 的无偏修正）。本课的
#   目标没有这个因子，所以核对时设为 `False`；另外单独测一次默认值，确认它确实改变了损失。
# - `_compute_loss` 读 `self.model.training`（决定 train/eval 模式）、`self.accelerator.reduce` / `gather`（日志）、
#   `self.args.delta`（另一种上界截断，默认 `None`）；`dapo` / `cispo` 还读 `inputs["num_items_in_batch"]`、
#   `self.args.steps_per_generation` 和 `self.accelerator.num_processes`。替身对象记录实际读到的属性，结果里列出。
# - TRL 的 `cispo` 与 MiniMind 一样用**绝对上限** `clamp(r, max=epsilon_high)`（不是 `1 + epsilon_high`）；但它的
#   归约是 `dapo` 式的全局 token 均值，而 MiniMind 的 `cispo_policy_loss` 按回答等权。所以 `cispo` 与
#   `grpo_family_loss(loss_type="cispo", num_items_in_batch=...)` 比较，同时记录 MiniMind 归约下的差值；
#   在所有回答等长的批上，两种归约相同，此时也直接和 `cispo_policy_loss` 比较。另外注意：TRL 在没设
#   `epsilon_high` 时令它等于 `epsilon`（0.2），对 `cispo` 来说就是上限 0.2，几乎把所有比率都封顶——用 `cispo`
#   时要显式设 `epsilon_high=5.0`。
# - 没装 TRL：结果是 `{"status": "skipped", ...}`。TRL 版本不同：照常运行并在结果中注明；若私有 API 变了
#   （方法或属性不存在、参数名改变），结果是 `{"status": "api_changed", ...}`，写明是哪个属性、哪个版本。

# %% nbgrader={"locked": true, "grade_id": "trl_conformance_code"}
import json
import os
import tempfile
import warnings
from collections import defaultdict
from types import SimpleNamespace

from tools.grading import trusted  # the genuine torch.allclose, captured before any learner code ran

TRL_VERSION_WRITTEN_FOR = "1.16.0"


class TrlApiChanged(Exception):
    """TRL's private API no longer matches what this check was written for."""

    def __init__(self, what, detail=""):
        super().__init__(f"{what}: {detail}" if detail else what)
        self.what = what
        self.detail = detail


class _MissingAttribute(AttributeError):
    pass


class _StandIn:
    """Attribute bag standing in for a GRPOTrainer; records every attribute TRL reads from it."""

    def __init__(self, label, reads, **attrs):
        object.__setattr__(self, "_label", label)
        object.__setattr__(self, "_reads", reads)
        object.__setattr__(self, "_attrs", dict(attrs))

    def __getattr__(self, name):
        attrs = object.__getattribute__(self, "_attrs")
        label = object.__getattribute__(self, "_label")
        if name.startswith("__"):
            raise AttributeError(name)
        if name not in attrs:
            object.__getattribute__(self, "_reads").add(f"{label}.{name} (缺失)")
            raise _MissingAttribute(f"{label}.{name}")
        object.__getattribute__(self, "_reads").add(f"{label}.{name}")
        return attrs[name]

    def __setattr__(self, name, value):
        object.__getattribute__(self, "_attrs")[name] = value


class _RecordingView:
    """Forwards attribute reads to a real object (the GRPOConfig) and records them."""

    def __init__(self, label, target, reads):
        object.__setattr__(self, "_label", label)
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_reads", reads)

    def __getattr__(self, name):
        object.__getattribute__(self, "_reads").add(f"{object.__getattribute__(self, '_label')}.{name}")
        return getattr(object.__getattribute__(self, "_target"), name)


class _RecordingInputs(dict):
    """The `inputs` dict of _compute_loss; records which keys TRL reads."""

    def __init__(self, reads, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._reads = reads

    def __getitem__(self, key):
        self._reads.add(f"inputs[{key!r}]")
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._reads.add(f"inputs[{key!r}]")
        return super().get(key, default)


def _local_accelerator(reads, num_processes=1):
    """Single-process stand-in for accelerate.Accelerator: reduce / gather are identities."""
    return _StandIn(
        "accelerator", reads, num_processes=num_processes, process_index=0, device=torch.device("cpu"),
        is_main_process=False, sync_gradients=True,
        reduce=lambda value, reduction="sum": value, gather=lambda value: value, gather_for_metrics=lambda value: value,
    )


def _trl_config(GRPOConfig, **overrides):
    base = dict(output_dir=os.path.join(tempfile.gettempdir(), "grpo-course-trl-check"), use_cpu=True,
                report_to="none", logging_strategy="no", save_strategy="no", per_device_train_batch_size=8,
                num_generations=4, gradient_accumulation_steps=1)
    base.update(overrides)
    try:
        with warnings.catch_warnings():  # transformers' own deprecation notices are not about this check
            warnings.simplefilter("ignore", FutureWarning)
            return GRPOConfig(**base)
    except TypeError as error:  # a field was renamed or removed
        raise TrlApiChanged("GRPOConfig", str(error)) from None


def _trl_method(GRPOTrainer, name):
    method = getattr(GRPOTrainer, name, None)
    if method is None:
        raise TrlApiChanged(f"GRPOTrainer.{name}", "方法不存在")
    return method


def _controlled_batch(seed, n_prompts, num_generations, t, lengths, spread, big_log_ratio=None, dtype=torch.float64):
    """Controlled log-probs whose ratios leave the clip range, variable-length masks, MiniMind advantages."""
    gen = torch.Generator().manual_seed(seed)
    n = n_prompts * num_generations
    old = -torch.rand(n, t, generator=gen, dtype=dtype) * 2.5 - 0.05  # [B*G, T]
    log_ratio = (torch.rand(n, t, generator=gen, dtype=dtype) * 2.0 - 1.0) * spread  # [B*G, T]
    if big_log_ratio is not None:  # push some tokens above a large absolute cap (CISPO)
        log_ratio[::2, 0] = big_log_ratio
    policy = old + log_ratio  # [B*G, T]
    ref = old + 0.3 * torch.randn(n, t, generator=gen, dtype=dtype)  # [B*G, T]
    mask = torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]  # [B*G, T]
    rewards = torch.rand(n, generator=gen, dtype=dtype)  # [B*G]
    advantages = group_relative_advantages(rewards, num_generations)  # [B*G]
    return policy, old, ref, mask, advantages


def _trl_loss_and_grad(GRPOTrainer, config, reads, policy, old, ref, mask, advantages, *, num_items_in_batch,
                       training=True, accumulation_steps=1):
    """Run GRPOTrainer._compute_loss on controlled log-probs; return (loss, d loss / d policy_logps)."""
    compute_loss = _trl_method(GRPOTrainer, "_compute_loss")
    leaf = policy.detach().clone().requires_grad_(True)

    def controlled_logps(_model, *args, **kwargs):
        # bypass the model forward: hand TRL the controlled per-token log-probs (and zero entropies)
        return leaf, torch.zeros_like(leaf), None

    model = _StandIn("model", reads, training=training)
    trainer = _StandIn(
        "trainer", reads, model=model, args=_RecordingView("args", config, reads),
        accelerator=_local_accelerator(reads), _get_per_token_logps_and_entropies=controlled_logps,
        aux_loss_enabled=False, top_entropy_quantile=1.0, off_policy_mask_threshold=None,
        importance_sampling_level=config.importance_sampling_level, loss_type=config.loss_type, beta=config.beta,
        epsilon_low=config.epsilon,
        epsilon_high=config.epsilon_high if config.epsilon_high is not None else config.epsilon,
        max_completion_length=config.max_completion_length, use_vllm=False, vllm_importance_sampling_correction=False,
        current_gradient_accumulation_steps=accumulation_steps, _entropy_bonus_enabled=False,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
    )
    n, t = policy.shape
    inputs = _RecordingInputs(reads, {
        "prompt_ids": torch.zeros(n, 1, dtype=torch.long), "prompt_mask": torch.ones(n, 1, dtype=torch.long),
        "completion_ids": torch.zeros(n, t, dtype=torch.long), "completion_mask": mask.long(),
        "advantages": advantages, "old_per_token_logps": old, "ref_per_token_logps": ref,
        "num_items_in_batch": torch.tensor(float(num_items_in_batch)),
    })
    try:
        loss = compute_loss(trainer, model, inputs)
    except _MissingAttribute as error:
        raise TrlApiChanged(str(error), "GRPOTrainer._compute_loss 读取了这个属性，而本核对没有提供（TRL 私有 API 已变化）") from None
    except KeyError as error:
        raise TrlApiChanged(f"inputs[{error}]", "GRPOTrainer._compute_loss 需要的输入键变了") from None
    except TypeError as error:
        raise TrlApiChanged("GRPOTrainer._compute_loss", f"调用方式变了：{error}") from None
    (grad,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), grad


def _facts_read(reads, inputs_present):
    """The reads this check documents: model/args/accelerator attributes and the loss inputs TRL looked up."""
    keep = [r for r in reads if r.split(".")[0] in ("model", "args", "accelerator")]
    keep += [r for r in reads if any(r == f"inputs[{key!r}]" for key in inputs_present)]
    return sorted(keep)


def _course_loss_and_grad(fn, policy, **kwargs):
    leaf = policy.detach().clone().requires_grad_(True)
    loss = fn(leaf, **kwargs)
    (grad,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), grad


def _clipping_fired(policy, old, mask, advantages, case):
    """How many valid tokens sit in a clipped region (zero GRPO gradient or capped CISPO weight)."""
    ratio = importance_ratio(policy, old, mask, case["importance_sampling_level"]).expand(policy.shape).detach()
    adv = advantages[:, None].expand(policy.shape)
    if case["loss_type"] == "cispo":
        fired = ratio > case["epsilon_high"]
    else:
        low, high = 1 - case["epsilon"], 1 + case["epsilon_high"]
        fired = ((ratio > high) & (adv > 0)) | ((ratio < low) & (adv < 0))
    outside = (ratio > (case["epsilon_high"] if case["loss_type"] == "cispo" else 1 + case["epsilon_high"])) | (ratio < 1 - case["epsilon"])
    return int((fired & mask).sum()), int((outside & mask).sum())


def _reward_check(GRPOTrainer, reads):
    """Two reward functions through GRPOTrainer._calculate_rewards; weights and NaN rule as TRL applies them."""
    calculate_rewards = _trl_method(GRPOTrainer, "_calculate_rewards")
    seen_columns = []

    def correctness_reward(prompts, completions, expected_answer, **kwargs):
        seen_columns.append(list(expected_answer))  # the dataset's extra column, one value per completion
        return [None if c.strip() == "?" else float(c.strip() == a) for c, a in zip(completions, expected_answer)]

    def integer_format_reward(prompts, completions, **kwargs):
        return [1.0 if c.strip().lstrip("-").isdigit() else None for c in completions]

    rows = [
        {"prompt": "2+2=", "completion": "4", "expected_answer": "4"},
        {"prompt": "2+2=", "completion": "four", "expected_answer": "4"},
        {"prompt": "3*3=", "completion": "8", "expected_answer": "9"},
        {"prompt": "3*3=", "completion": "?", "expected_answer": "9"},
    ]
    weights = torch.tensor([0.9, 0.1])
    trainer = _StandIn(
        "trainer", reads, reward_funcs=[correctness_reward, integer_format_reward],
        reward_processing_classes=[None, None], reward_func_names=["correctness", "integer_format"],
        reward_weights=weights, accelerator=_local_accelerator(reads), state=SimpleNamespace(global_step=0),
        args=SimpleNamespace(report_to=[]), _log_completion_extra=lambda *a, **k: None,
        _log_metric=lambda *a, **k: None, environments=None,
    )
    prompts = [r["prompt"] for r in rows]
    completions = [r["completion"] for r in rows]
    try:
        per_func = calculate_rewards(trainer, rows, prompts, completions, [[0]] * len(rows))
    except _MissingAttribute as error:
        raise TrlApiChanged(str(error), "GRPOTrainer._calculate_rewards 读取了这个属性，而本核对没有提供") from None
    except TypeError as error:
        raise TrlApiChanged("GRPOTrainer._calculate_rewards", f"调用方式变了：{error}") from None
    # TRL's combination rule (_generate_and_score_completions, multi_objective_aggregation="sum_then_normalize")
    unscorable = torch.isnan(per_func).all(dim=1)  # [N]
    combined = (per_func * weights[None, :]).nansum(dim=1)  # [N]
    combined[unscorable] = torch.nan
    nan = float("nan")
    expected_columns = torch.tensor([[1.0, 1.0], [0.0, nan], [0.0, 1.0], [nan, nan]])
    checks = {
        "reward_columns_match": bool(trusted("torch.allclose")(per_func, expected_columns, equal_nan=True)),
        "none_became_nan": bool(torch.isnan(per_func[1, 1]) and torch.isnan(per_func[3, 0])),
        "extra_column_passed": seen_columns == [["4", "4", "9", "9"]],
        "weighted_rewards_match": bool(trusted("torch.allclose")(combined[:3], torch.tensor([1.0, 0.0, 0.1]))),
        "unscorable_kept_nan": bool(unscorable.tolist() == [False, False, False, True] and torch.isnan(combined[3])),
    }
    return checks, {"rewards_per_func": [[None if v != v else round(v, 6) for v in row] for row in per_func.tolist()],
                    "combined": [None if v != v else round(v, 6) for v in combined.tolist()]}


LOSS_CASES = [
    # name, TRL config, how the course computes the same objective
    dict(name="grpo", loss_type="grpo", epsilon=0.2, epsilon_high=0.2, importance_sampling_level="token", beta=0.04),
    dict(name="grpo_clip_higher", loss_type="grpo", epsilon=0.2, epsilon_high=0.28, importance_sampling_level="token", beta=0.0),
    dict(name="bnpo", loss_type="bnpo", epsilon=0.2, epsilon_high=0.28, importance_sampling_level="token", beta=0.04),
    dict(name="dr_grpo", loss_type="dr_grpo", epsilon=0.2, epsilon_high=0.28, importance_sampling_level="token", beta=0.04),
    dict(name="dapo", loss_type="dapo", epsilon=0.2, epsilon_high=0.28, importance_sampling_level="token", beta=0.04),
    dict(name="cispo", loss_type="cispo", epsilon=0.2, epsilon_high=5.0, importance_sampling_level="token", beta=0.04),
    dict(name="gspo_sequence", loss_type="grpo", epsilon=3e-4, epsilon_high=4e-4, importance_sampling_level="sequence", beta=0.0),
]


def check_trl_conformance(atol=1e-6):
    """Compare the learner's losses with GRPOTrainer's private loss path; returns a JSON-ready dict."""
    try:
        import trl
        from trl import GRPOConfig, GRPOTrainer
    except ImportError as error:
        return {"status": "skipped", "reason": f"没有可用的 TRL（{error}）。本节需要 PT-CPU 环境：pip install trl=={TRL_VERSION_WRITTEN_FOR}",
                "written_for": TRL_VERSION_WRITTEN_FOR}
    trl_version = getattr(trl, "__version__", "unknown")
    try:  # GRPOTrainer's logging goes through accelerate, which needs its (single-process, CPU) state
        from accelerate import PartialState

        PartialState(cpu=True)
    except Exception as error:  # noqa: BLE001  (reported, not hidden)
        return {"status": "api_changed", "attribute": "accelerate.PartialState", "detail": str(error),
                "trl_version": trl_version, "written_for": TRL_VERSION_WRITTEN_FOR}
    result = {"status": "passed", "trl_version": trl_version, "written_for": TRL_VERSION_WRITTEN_FOR,
              "framework_paths": ["GRPOTrainer._calculate_rewards", "GRPOTrainer._compute_loss"], "atol": atol}
    if trl_version != TRL_VERSION_WRITTEN_FOR:
        result["version_note"] = f"本核对为 trl=={TRL_VERSION_WRITTEN_FOR} 编写，当前是 {trl_version}：照常运行，结果仅供参考"
    failures = []
    try:
        reads = set()
        reward_checks, reward_values = _reward_check(GRPOTrainer, reads)
        result["rewards"] = {"checks": reward_checks, **reward_values}
        failures += [f"rewards.{k}" for k, ok in reward_checks.items() if not ok]

        # advantage convention: MiniMind (population std) vs TRL (Bessel-corrected nanstd), both + 1e-4
        from trl.trainer.utils import nanstd
        two = torch.tensor([[1.0, 0.0]])
        result["advantage_convention"] = {
            "group": [1.0, 0.0],
            "minimind_population_std": round(float(two.std(dim=1, unbiased=False)), 6),
            "trl_nanstd_bessel": round(float(nanstd(two, dim=1)), 6),
            "minimind_advantages": [round(v, 6) for v in group_relative_advantages(two.view(-1), 2).tolist()],
            "note": "两边都喂同一份 advantages（本课的 group_relative_advantages），只比较损失本身",
        }

        # use_bias_correction_kl: exists, defaults to True, and changes the objective when beta > 0
        default_config = _trl_config(GRPOConfig)
        if not hasattr(default_config, "use_bias_correction_kl"):
            raise TrlApiChanged("GRPOConfig.use_bias_correction_kl", "字段不存在")
        result["use_bias_correction_kl_default"] = default_config.use_bias_correction_kl

        lengths = [8, 3, 5, 8, 1, 6, 2, 7]  # [B*G] = 2 prompts x 4 generations, variable lengths
        max_len = 8
        loss_results = {}
        for case in LOSS_CASES:
            case_reads = set()
            policy, old, ref, mask, adv = _controlled_batch(
                seed=24, n_prompts=2, num_generations=4, t=max_len, lengths=lengths, spread=0.9,
                big_log_ratio=2.0 if case["loss_type"] == "cispo" else None)
            items = int(mask.sum())
            config = _trl_config(
                GRPOConfig, loss_type=case["loss_type"], epsilon=case["epsilon"], epsilon_high=case["epsilon_high"],
                importance_sampling_level=case["importance_sampling_level"], beta=case["beta"],
                use_bias_correction_kl=False, max_completion_length=max_len, scale_rewards="group")
            trl_loss, trl_grad = _trl_loss_and_grad(GRPOTrainer, config, case_reads, policy, old, ref, mask, adv,
                                                    num_items_in_batch=items)
            course_kwargs = dict(old_logps=old, advantages=adv, completion_mask=mask, loss_type=case["loss_type"],
                                 epsilon_low=case["epsilon"], epsilon_high=case["epsilon_high"],
                                 importance_sampling_level=case["importance_sampling_level"], beta=case["beta"],
                                 ref_logps=ref, max_completion_length=max_len, num_items_in_batch=items)
            course_loss, course_grad = _course_loss_and_grad(grpo_family_loss, policy, **course_kwargs)
            fired, outside = _clipping_fired(policy, old, mask, adv, case)
            entry = {
                "trl_loss": round(float(trl_loss), 8), "course_loss": round(float(course_loss), 8),
                "abs_error": float((trl_loss - course_loss).abs()),
                "grad_max_abs_error": float((trl_grad - course_grad).abs().max()),
                "clipped_tokens": fired, "tokens_outside_clip_range": outside, "valid_tokens": items,
                "trl_reads": _facts_read(case_reads, inputs_present=("advantages", "num_items_in_batch")),
            }
            entry["passed"] = bool(entry["abs_error"] <= atol and entry["grad_max_abs_error"] <= atol and fired > 0)
            if case["loss_type"] == "grpo" and case["importance_sampling_level"] == "token" and case["epsilon_high"] == case["epsilon"]:
                mini, mini_grad = _course_loss_and_grad(grpo_policy_loss, policy, old_logps=old, advantages=adv,
                                                        completion_mask=mask, epsilon=case["epsilon"], beta=case["beta"], ref_logps=ref)
                entry["grpo_policy_loss_abs_error"] = float((mini - trl_loss).abs())
                entry["passed"] &= bool(entry["grpo_policy_loss_abs_error"] <= atol and (mini_grad - trl_grad).abs().max() <= atol)
            if case["loss_type"] == "cispo":
                mini, _ = _course_loss_and_grad(cispo_policy_loss, policy, old_logps=old, advantages=adv,
                                                completion_mask=mask, epsilon_high=case["epsilon_high"], beta=case["beta"], ref_logps=ref)
                entry["minimind_reduction_loss"] = round(float(mini), 8)
                entry["minimind_vs_trl_reduction_diff"] = round(float(mini - trl_loss), 8)
                # equal-length batch: both reductions agree, so MiniMind's cispo_policy_loss must match TRL directly
                full = torch.ones_like(mask)
                trl_full, trl_full_grad = _trl_loss_and_grad(GRPOTrainer, config, set(), policy, old, ref, full, adv,
                                                             num_items_in_batch=int(full.sum()))
                mini_full, mini_full_grad = _course_loss_and_grad(cispo_policy_loss, policy, old_logps=old, advantages=adv,
                                                                  completion_mask=full, epsilon_high=case["epsilon_high"],
                                                                  beta=case["beta"], ref_logps=ref)
                entry["equal_lengths_cispo_policy_loss_abs_error"] = float((mini_full - trl_full).abs())
                entry["absolute_cap_confirmed"] = bool(entry["equal_lengths_cispo_policy_loss_abs_error"] <= atol
                                                       and (mini_full_grad - trl_full_grad).abs().max() <= atol)
                # the other convention (cap = 1 + epsilon_high) gives a different number on these inputs
                one_plus, _ = _course_loss_and_grad(cispo_policy_loss, policy, old_logps=old, advantages=adv,
                                                    completion_mask=full, epsilon_high=1.0 + case["epsilon_high"],
                                                    beta=case["beta"], ref_logps=ref)
                entry["one_plus_epsilon_high_abs_error"] = float((one_plus - trl_full).abs())
                entry["absolute_cap_confirmed"] &= entry["one_plus_epsilon_high_abs_error"] > atol
                entry["passed"] &= entry["absolute_cap_confirmed"]
            loss_results[case["name"]] = entry
            failures += [f"loss.{case['name']}"] if not entry["passed"] else []

        # dapo over two micro-batches (gradient accumulation): TRL's per-micro-batch losses add up to the
        # course's token mean over the global batch
        policy, old, ref, mask, adv = _controlled_batch(seed=7, n_prompts=2, num_generations=4, t=max_len,
                                                        lengths=lengths, spread=0.9)
        config = _trl_config(GRPOConfig, loss_type="dapo", epsilon=0.2, epsilon_high=0.28, beta=0.0,
                             use_bias_correction_kl=False, max_completion_length=max_len,
                             gradient_accumulation_steps=2, steps_per_generation=2)
        items = int(mask.sum())
        halves = [slice(0, 4), slice(4, 8)]
        trl_total = sum(_trl_loss_and_grad(GRPOTrainer, config, set(), policy[s], old[s], ref[s], mask[s], adv[s],
                                           num_items_in_batch=items, accumulation_steps=2)[0] for s in halves)
        course_total = grpo_family_loss(policy, old, adv, mask, "dapo", epsilon_low=0.2, epsilon_high=0.28,
                                        num_items_in_batch=items).detach()
        entry = {"trl_loss_sum_over_micro_batches": round(float(trl_total), 8), "course_loss": round(float(course_total), 8),
                 "abs_error": float((trl_total - course_total).abs())}
        entry["passed"] = bool(entry["abs_error"] <= atol)
        loss_results["dapo_two_micro_batches"] = entry
        failures += [] if entry["passed"] else ["loss.dapo_two_micro_batches"]

        # the default use_bias_correction_kl=True multiplies the KL term by the ratio: not the course's objective
        policy, old, ref, mask, adv = _controlled_batch(seed=24, n_prompts=2, num_generations=4, t=max_len,
                                                        lengths=lengths, spread=0.9)
        config = _trl_config(GRPOConfig, loss_type="grpo", epsilon=0.2, beta=0.04, max_completion_length=max_len)
        trl_default, _ = _trl_loss_and_grad(GRPOTrainer, config, set(), policy, old, ref, mask, adv, num_items_in_batch=int(mask.sum()))
        course_plain = grpo_policy_loss(policy, old, adv, mask, epsilon=0.2, beta=0.04, ref_logps=ref).detach()
        result["bias_correction_kl_effect"] = {
            "trl_default_loss": round(float(trl_default), 8), "course_loss": round(float(course_plain), 8),
            "changes_loss": bool((trl_default - course_plain).abs() > 1e-6),
        }
        result["loss"] = loss_results
    except TrlApiChanged as error:
        return {"status": "api_changed", "attribute": error.what, "detail": error.detail, "trl_version": trl_version,
                "written_for": TRL_VERSION_WRITTEN_FOR}
    if failures:
        result["status"] = "failed"
        result["failed"] = failures
    return result


print(f"核对代码已就绪（为 trl=={TRL_VERSION_WRITTEN_FOR} 编写）")

# %% nbgrader={"locked": true, "grade_id": "trl_conformance_run"}
def _fmt(value):
    return "-" if value is None else f"{value:.1e}"


def print_conformance_summary(result):
    """A short human-readable view of the result; the full result follows as one JSON line."""
    print(f"status: {result['status']}  (trl {result.get('trl_version', '-')}, 核对为 trl=={result['written_for']} 编写)")
    for key in ("reason", "version_note", "attribute", "detail", "failed"):
        if key in result:
            print(f"{key}: {result[key]}")
    if "rewards" in result:
        print("奖励核对:", ", ".join(f"{k}={v}" for k, v in result["rewards"]["checks"].items()))
    if "loss" in result:
        print(f"{'case':<24}{'TRL':>12}{'本课':>12}{'|误差|':>10}{'梯度误差':>10}{'裁剪 token':>10}  通过")
        for name, entry in result["loss"].items():
            trl_value = entry.get("trl_loss", entry.get("trl_loss_sum_over_micro_batches"))
            print(f"{name:<24}{trl_value:>12.6f}{entry['course_loss']:>12.6f}{_fmt(entry['abs_error']):>10}"
                  f"{_fmt(entry.get('grad_max_abs_error')):>10}{entry.get('clipped_tokens', '-'):>10}  {entry['passed']}")
        cispo = result["loss"].get("cispo", {})
        if cispo:
            print(f"cispo：MiniMind 归约（回答等权）比 TRL 归约（全局 token 均值）多 {cispo['minimind_vs_trl_reduction_diff']:+.6f}；"
                  f"等长批上 cispo_policy_loss 与 TRL 一致（绝对上限）: {cispo['absolute_cap_confirmed']}")
        print(f"use_bias_correction_kl 默认值 = {result['use_bias_correction_kl_default']}，"
              f"默认值下 TRL 损失 {result['bias_correction_kl_effect']['trl_default_loss']:.6f} "
              f"≠ 本课 {result['bias_correction_kl_effect']['course_loss']:.6f}")
        print("dapo 读取的属性:", ", ".join(result["loss"]["dapo"]["trl_reads"]))


trl_conformance = check_trl_conformance()
print_conformance_summary(trl_conformance)
print("trl_conformance =", json.dumps(trl_conformance, ensure_ascii=False))
if trl_conformance["status"] == "failed":
    raise AssertionError(f"框架一致性核对失败：{trl_conformance['failed']}")

# %% [markdown]
# 读结果时看这几项：`status`；每个 `loss` 条目的 `abs_error` 与 `grad_max_abs_error`（都应 ≤ `1e-6`）和
# `clipped_tokens`（> 0 说明裁剪确实发生了，否则这次比较不能证明裁剪写对了）；`trl_reads` 列出 TRL 在该
# `loss_type` 下实际读取的 `model` / `args` / `accelerator` 属性和损失输入（比如只有 `dapo` / `cispo` 读
# `num_items_in_batch`、`args.steps_per_generation`、`accelerator.num_processes`，只有 `beta != 0` 时读
# `args.use_bias_correction_kl`）；`cispo` 条目里的 `minimind_vs_trl_reduction_diff` 是两种归约在变长批上的差；
# `one_plus_epsilon_high_abs_error` 是把上限写成 `1 + ε_high` 时与 TRL 的差（不为 0，说明 TRL 用的是绝对上限）；
# `bias_correction_kl_effect.changes_loss` 说明 TRL 的默认 KL 修正确实改变了目标。最后一行是完整结果的 JSON。
# 运行时 TRL 还会为那条所有奖励函数都返回 `None` 的回答打印一条警告（“All reward functions returned None”），
# 这正是核对想触发的情形。

# %% [markdown]
# ## STOP HERE
#
# 以上就是本课要完成的全部内容。提交前从头到尾重新运行一遍（Kernel → Restart & Run All），确认每个可见测试都打印了
# “通过”。下面的解析留给做完之后阅读。

# %% [markdown] tags=["solution-only"]
# ## 解析
#
# - **GRPO 的梯度为什么会消失。** `min(r·A, clip(r)·A)` 是逐元素的最小值：当 `A > 0` 且 `r > 1+ε`（或 `A < 0` 且
#   `r < 1−ε`）时，最小值取到常数分支，这个 token 对损失的导数就是 0。这是故意的“保守”设计——这一步已经
#   朝有利方向走得够远了。代价是这些 token 在本次更新里完全不提供信号；在长回答、低概率 token 较多时，被
#   “关掉”的 token 可能很多。
# - **CISPO 的取舍。** 它保留所有 token 的梯度，只把重要性权重封顶并当作常数。权重封顶控制了方差，detach
#   让梯度的形式保持为“加权的 `∇log π`”。常见错误有两个：忘记 `detach`（梯度多出一条经过比率的路径，隐藏测试的
#   梯度比较会失败），以及把上限写成 `1 + ε_high`（在比率介于 `ε_high` 与 `1 + ε_high` 之间时数值不同）。
# - **归约决定长度偏置。** `grpo` 让每条回答等权，`bnpo` / `dapo` 让每个 token 等权，`dr_grpo` 除以常数。它们的
#   逐 token 损失完全相同，差别只在 `∂L/∂per_token_loss`。`dapo` 与 `bnpo` 的区别只在梯度累积 / 多进程时出现：
#   `dapo` 的分母是整个优化步的 token 总数。
# - **GSPO。** 序列级比率是对数比率的均值再取指数，一条回答共享一个比率，因此裁剪也是整条回答一起；KL 仍是
#   token 级的。
# - **与框架核对时要对齐的“隐藏约定”。** 优势的标准差（总体 vs Bessel 校正）、KL 的比率修正
#   （`use_bias_correction_kl`）、`cispo` 的归约（MiniMind 的回答等权 vs TRL 的全局 token 均值）、`epsilon_high`
#   未设置时的默认值——这些都不会让代码报错，只会让数值悄悄不同。核对框架时，先把这些约定逐项写清楚，再喂同一份
#   输入比较数值和梯度。
