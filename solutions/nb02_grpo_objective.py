# ---
# jupyter:
#   kernelspec: {display_name: Python 3, language: python, name: python3}
#   course: {profile: BASE-CPU}
# ---

# %% [markdown]
# # 第 2 课　GRPO 目标函数：概率比、裁剪、参考 KL、掩码与候选等权
#
# ## 导读
#
# 上一课把"同一提示的候选奖励"变成了组内优势 $A_i$：正数表示这个回答比同组平均好，负数表示更差。
# 这一课回答下一个问题：**有了 $A_i$，怎样把它变成一个可以反向传播的损失？** 要处理的事情有五件：
#
# 1. **概率比**：回答是旧策略 $\pi_{\text{old}}$ 采样的，更新的却是当前策略 $\pi_\theta$，用 $\rho = \pi_\theta/\pi_{\text{old}}$ 连接两者；
# 2. **裁剪**：一次更新不能把概率比推得太远，超出 $[1-\epsilon, 1+\epsilon]$ 的部分不再给梯度；
# 3. **参考 KL**：用一个非负的逐词元估计量，把策略拴在冻结的参考模型附近，防止长期漂移；
# 4. **回答掩码**：提示与填充位置不属于回答，不能进入损失；
# 5. **候选等权**：每个回答先在自己的有效词元上求平均，再在回答之间平均——长回答不会因为词元多而占更大权重。
#
# 你将实现两个计分函数：`token_kl_penalty`（k3 估计量）和 `compute_grpo_loss`（完整的 GRPO 目标），
# 用两张在笔记本里计算出来的图看清裁剪和等权到底做了什么，并用蒙特卡洛实验看清 k1、k2、k3 三种 KL 估计量的值与**梯度**。

# %% [markdown]
# ## 运行环境
#
# - 环境配置：**BASE-CPU**（PyTorch + matplotlib，不下载模型，不需要 GPU）。
# - 笔记本最上方锁定的第一个单元把课程根目录加入 `sys.path`，先于你的代码导入 `tools.grading`，并打印 BASE-CPU 的环境检查表。
# - 运行时间：`make bench` 在**空闲的** 2 核 CPU 上测量本课（不含内核启动）；机器繁忙时可能慢 2–4 倍。
#   笔记本最后一个代码单元会打印这次运行实际用了多少秒，以它为准。
# - 本课**不依赖**你是否完成了第 1 课：组内优势从第 1 课的参考实现导入（原因见“准备”一节）。
# - 掩码、`beta`、ε、名称等约定见课程的[约定卡](../../docs/CONVENTIONS.md)（C1–C6）与术语表。
#
# ## 前置阅读
#
# - 第 1 课：候选组与组内优势。
# - PPO 的裁剪目标：Schulman et al., 2017, *Proximal Policy Optimization Algorithms*（arXiv:1707.06347）第 3 节。
# - GRPO 的目标函数：Shao et al., 2024, *DeepSeekMath*（arXiv:2402.03300）式 (3) 与 (4)。
# - KL 的三种单样本估计量 k1/k2/k3：John Schulman, *Approximating KL Divergence*（2020 年的博客文章）。
# - 长度偏差：Liu et al., 2025, *Understanding R1-Zero-Like Training*（Dr. GRPO，arXiv:2503.20783）第 3 节；
#   TRL `GRPOConfig` 中 `loss_type` 的文档（`grpo` / `bnpo` / `dr_grpo` / `dapo`）。

# %%
# %matplotlib inline
import math
import time

import matplotlib.pyplot as plt
import torch

from tools.grading import assert_close, expect_value_error, max_abs_diff

_lesson_started = time.perf_counter()
torch.manual_seed(0)
print("torch", torch.__version__)

# %% [markdown]
# ## 准备　提供的组内优势（只读）
#
# `compute_grpo_loss` 要先从奖励算出组内优势。这里直接导入第 1 课计分函数 `compute_group_advantages` 的**参考实现**
# （`tools/lessons/nb01_group_advantages.py` 由 `make release` 从第 1 课的源文件生成，“一个函数只有一个家”），而不是让你从第 1 课复制：
#
# - 每一课单独评分。如果第 2 课依赖你第 1 课的答案，第 1 课的一个小错误就会让第 2 课的测试也全部失败，
#   分数就不再反映你在这一课学会了什么。
# - 它与第 1 课的约定完全相同：总体标准差、`max(std, eps)` 下限、全等奖励组与单元素组严格为 0（约定卡 C4）。
# - 这个单元是锁定的；评分时也会使用这里的版本。你的 `compute_grpo_loss` 直接调用它即可。

# %% nbgrader={"locked": true, "grade_id": "provided_group_advantages"}
#@save
from tools.lessons.nb01_group_advantages import compute_group_advantages

# %%
_adv = compute_group_advantages(torch.tensor([1.0, 2.0, 0.5, 1.5, 3.0]), torch.tensor([0, 0, 1, 1, 2]))
print("演示：奖励 [1, 2 | 0.5, 1.5 | 3] 的组内优势 =", _adv.tolist())
assert _adv.tolist() == [-1.0, 1.0, -1.0, 1.0, 0.0]

# %% [markdown]
# ## 第 1 步　概率比：把旧策略采的样本用于当前策略
#
# 第 $i$ 个回答的第 $t$ 个词元由旧策略 $\pi_{\text{old}}$ 采样。更新时我们优化的是当前策略 $\pi_\theta$，
# 两者之间用**逐词元概率比**连接：
#
# $$\rho_{i,t} = \frac{\pi_\theta(y_{i,t}\mid x, y_{i,<t})}{\pi_{\text{old}}(y_{i,t}\mid x, y_{i,<t})}
# = \exp\big(\log\pi_\theta(y_{i,t}) - \log\pi_{\text{old}}(y_{i,t})\big).$$
#
# 用对数概率之差再取指数，而不是直接相除：长回答里单个词元的概率可能小到 $10^{-30}$，直接存概率会下溢，对数概率不会。
#
# **旧策略是数据，不是参数。** $\log\pi_{\text{old}}$ 是采样时记下的数，在这次更新里是常数，必须 `detach()`（或在 `torch.no_grad()` 下计算）。
# 一个有启发性的事实：在第一次更新、$\theta = \theta_{\text{old}}$ 时 $\rho = 1$，但它的梯度不是 0：
#
# $$\nabla_\theta\, \rho_{i,t} A_i\ \Big|_{\theta=\theta_{\text{old}}} = A_i\, \nabla_\theta \log \pi_\theta(y_{i,t}).$$
#
# 这正是策略梯度。如果旧对数概率恰好来自同一个计算图（TRL 在每批数据只更新一次时就是这样：它直接拿当前的对数概率 `detach()` 之后当作旧值）却忘了 `detach`，
# $\rho = \exp(\log\pi_\theta - \log\pi_\theta) \equiv 1$，梯度恰好为 0，模型什么也学不到。下面用一个 5 个词的玩具策略验证这两点。

# %%
logits = torch.tensor([0.3, -1.2, 0.8, 0.0, 0.5], requires_grad=True)  # [V] a toy policy over V = 5 tokens
sampled = torch.tensor([2, 0, 2, 4])                                      # [T] tokens sampled from it
advantage = 1.5

logp = torch.log_softmax(logits, dim=-1)[sampled]                         # [T] log pi_theta(y_t)
ratio = torch.exp(logp - logp.detach())                                    # [T] all ones, but differentiable
(grad_ratio,) = torch.autograd.grad((ratio * advantage).sum(), logits)
(grad_pg,) = torch.autograd.grad((advantage * torch.log_softmax(logits, dim=-1)[sampled]).sum(), logits)
print("ratio =", ratio.tolist())
print("d(rho*A)/d logits   =", [round(g, 4) for g in grad_ratio.tolist()])
print("A * d log pi/d logits =", [round(g, 4) for g in grad_pg.tolist()])
assert_close(grad_ratio, grad_pg, atol=1e-7, what="theta = theta_old 时 rho*A 的梯度应等于策略梯度 A * grad log pi")

logp_same_graph = torch.log_softmax(logits, dim=-1)[sampled]               # "old" log-probs NOT detached
ratio_broken = torch.exp(logp_same_graph - logp_same_graph)                # [T] identically 1
(grad_broken,) = torch.autograd.grad((ratio_broken * advantage).sum(), logits)
print("忘记 detach 时的梯度 =", grad_broken.tolist())
assert grad_broken.abs().max().item() == 0.0

# %% [markdown]
# ## 第 2 步　裁剪：只在"还没走太远"的方向上给梯度
#
# GRPO 沿用 PPO 的裁剪目标。对每个有效词元：
#
# $$s_{i,t} = \min\big(\rho_{i,t} A_i,\ \operatorname{clip}(\rho_{i,t},\, 1-\epsilon,\, 1+\epsilon)\, A_i\big).$$
#
# 取 $\min$ 意味着总是选**更悲观**的那个估计。分四种情况看（$\epsilon$ 在 TRL 中叫 `epsilon`，常用 0.2）：
#
# | 情况 | 谁更小 | 对 $\rho$ 的梯度 | 含义 |
# | --- | --- | --- | --- |
# | $A>0$，$\rho > 1+\epsilon$ | 裁剪项 $(1+\epsilon)A$ | 0 | 这个好回答的概率已经提高得够多了，不再继续推 |
# | $A>0$，$\rho < 1-\epsilon$ | 未裁剪项 $\rho A$ | $A$ | 好回答的概率反而下降了，照常把它拉回来 |
# | $A<0$，$\rho < 1-\epsilon$ | 裁剪项 $(1-\epsilon)A$ | 0 | 这个差回答的概率已经压得够低了，不再继续压 |
# | $A<0$，$\rho > 1+\epsilon$ | 未裁剪项 $\rho A$ | $A$ | 差回答的概率反而上升了，照常把它压下去 |
#
# 在 $[1-\epsilon, 1+\epsilon]$ 之内两项相等，梯度就是普通的策略梯度。
# 裁剪只去掉"朝有利方向走得太远"的那一侧；朝不利方向偏离时，惩罚不受限制。
# 下图在一个概率比网格上用自动求导算出 $\partial s/\partial\rho$，把它恰好为 0 的区域涂成灰色。

# %% nbgrader={"locked": true, "grade_id": "demo_ratio_grid"}
clip_eps = 0.2
ratio_grid = torch.linspace(0.3, 1.8, 601, dtype=torch.float64, requires_grad=True)  # [R]

fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
zero_gradient_intervals = {}
for ax, adv in zip(axes, (1.0, -1.0)):
    unclipped = ratio_grid * adv                                                  # [R]
    clipped = ratio_grid.clamp(1 - clip_eps, 1 + clip_eps) * adv                  # [R]
    surrogate = torch.minimum(unclipped, clipped)                                 # [R]
    (slope,) = torch.autograd.grad(surrogate.sum(), ratio_grid)                   # [R] d s / d rho
    flat = slope == 0
    x = ratio_grid.detach()
    zero_gradient_intervals[adv] = (x[flat].min().item(), x[flat].max().item())
    ax.plot(x, unclipped.detach(), ":", color="tab:blue", label="rho * A (unclipped)")
    ax.plot(x, clipped.detach(), "--", color="tab:orange", label="clip(rho) * A")
    ax.plot(x, surrogate.detach(), "-", color="black", linewidth=2, label="min(...) = objective")
    ax.fill_between(x, 0, 1, where=flat.tolist(), transform=ax.get_xaxis_transform(), color="grey", alpha=0.25,
                    label="zero gradient")
    for edge in (1 - clip_eps, 1 + clip_eps):
        ax.axvline(edge, color="grey", linewidth=0.8)
    ax.set(xlabel="ratio rho = pi_theta / pi_old", ylabel="per-token objective s",
           title=f"A = {adv:+.0f}, epsilon = {clip_eps}")
    ax.grid(alpha=0.3)
axes[0].legend(fontsize=8, loc="upper left")
fig.tight_layout()
plt.show()

for adv, (lo, hi) in zero_gradient_intervals.items():
    print(f"A = {adv:+.0f}: 梯度为 0 的比率区间 ≈ [{lo:.3f}, {hi:.3f}]")
# The flat regions are exactly beyond 1 + eps for A > 0 and below 1 - eps for A < 0.
assert abs(zero_gradient_intervals[1.0][0] - (1 + clip_eps)) < 5e-3 and zero_gradient_intervals[1.0][1] == 1.8
assert abs(zero_gradient_intervals[-1.0][1] - (1 - clip_eps)) < 5e-3 and zero_gradient_intervals[-1.0][0] == 0.3

# %% [markdown]
# 注意梯度为 0 并不意味着损失里"没有"这些词元：它们仍然贡献一个常数值，只是不再推动参数。
# 训练日志里的**裁剪比例**（clip fraction；TRL 把两侧分别记为 `clip_ratio/high_mean`、`clip_ratio/low_mean`，合计为 `clip_ratio/region_mean`）统计的就是落在灰色区域里的词元所占的比例；
# 它持续偏高，说明每批数据被重复用得太多，或者学习率太大。

# %% [markdown]
# ## 第 3 步　参考 KL：k3 估计量
#
# 裁剪只约束**这一次**更新相对于采样策略走了多远；多次更新累积起来，策略仍可能离初始模型越来越远，
# 学会投机取巧地拿奖励（reward hacking）或丢掉原有能力。GRPO 因此可以再加一项：当前策略与冻结的**参考策略** $\pi_{\text{ref}}$
# （通常是 RL 开始前的 SFT 模型）之间的 KL 散度，权重为 $\beta$（TRL 中的 `beta`）。
#
# 精确的 KL 要对整个词表求和；我们手里只有采样到的词元，于是用单样本估计量。记
# $d_{i,t} = \log\pi_{\text{ref}}(y_{i,t}) - \log\pi_\theta(y_{i,t})$，三种常见估计是
#
# | 名称 | 表达式 | 期望（$y\sim\pi_\theta$） | 单个样本的值 |
# | --- | --- | --- | --- |
# | k1 | $-d$ | 精确等于 $\mathrm{KL}(\pi_\theta\,\|\,\pi_{\text{ref}})$ | 可正可负，方差大 |
# | k2 | $d^2/2$ | 有偏（$d$ 很小时的二阶近似） | 非负 |
# | **k3** | $e^{d} - d - 1$ | 精确等于 $\mathrm{KL}(\pi_\theta\,\|\,\pi_{\text{ref}})$ | **非负**；**只在 $\pi_\theta \approx \pi_{\text{ref}}$ 时**方差小 |
#
# k3 无偏，是因为 $\mathbb{E}_{\pi_\theta}[e^{d}] = \sum_y \pi_{\text{ref}}(y) = 1$，所以 $\mathbb{E}[e^d - d - 1] = \mathbb{E}[-d]$；
# 它非负，是因为对任何实数 $e^{x} \ge 1 + x$，且只在 $d=0$（两个策略对这个词元给出相同概率）时为 0。
# 它的方差小是有条件的：$d$ 接近 0 时 $e^d - d - 1 \approx d^2/2$，波动远小于 $-d$；但两个策略相差很远时，
# 参考策略远比当前策略更看好的词元会让 $e^{d}$ 变得很大，k3 的方差反而可能超过 k1（下面的实验会量出来）。
#
# **谁在用 k3？** MiniMind 的 `train_grpo.py` 用 k3。TRL 1.16 的 `GRPOConfig` 中 `beta` **默认是 0.0**：不加 KL 项，
# 连参考模型都不加载（省显存、省一次前向）；只有 `beta > 0` 时才计算 k3，而且默认 `use_bias_correction_kl=True`，
# 实际加进损失的是 **概率比 × k3**（原因与效果见本步最后的实验）。参考策略同样是冻结的：它不接收梯度。
#
# ### TODO 1　实现 `token_kl_penalty`
#
# - 输入：同形状的 `policy_logps`（当前策略，可能带梯度）与 `ref_logps`（参考策略）。
# - 输出：同形状的逐词元惩罚 $e^{d}-d-1$，$d$ = `ref_logps - policy_logps`。
# - 参考策略不接收梯度：即使传入的 `ref_logps.requires_grad` 为真，反向传播后它的 `.grad` 也应为 `None`。
# - 两个输入形状不同时抛出中文说明的 `ValueError`（不要依赖广播）。

# %% nbgrader={"solution": true, "grade_id": "token_kl_penalty"}
#@save
import torch


def token_kl_penalty(policy_logps, ref_logps):
    """逐词元的参考 KL 惩罚（k3 估计量）：exp(d) - d - 1，d = ref_logps - policy_logps；参考策略不接收梯度。"""
    ### BEGIN SOLUTION
    if not torch.is_tensor(policy_logps) or not torch.is_tensor(ref_logps):
        raise ValueError("输入契约：policy_logps 与 ref_logps 必须是 torch.Tensor")
    if policy_logps.shape != ref_logps.shape:
        raise ValueError(
            f"输入契约：policy_logps 与 ref_logps 必须同形状，实际 {tuple(policy_logps.shape)} 对 {tuple(ref_logps.shape)}"
        )
    delta = ref_logps.detach() - policy_logps  # [..., T] frozen reference
    return torch.exp(delta) - delta - 1.0       # [..., T] >= 0
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_token_kl_penalty_visible", "points": 2}
"""检查 token_kl_penalty：k3 的数值、非负、两策略相同时为 0、参考策略不接收梯度、当前策略的梯度、形状契约（可见测试）。"""
policy = torch.tensor([[-1.0, -0.5, -2.0], [-0.3, -0.3, -1.0]], dtype=torch.float64, requires_grad=True)
ref = torch.tensor([[-1.0, -0.5 + math.log(2.0), -3.0], [-0.3, -1.3, -1.0]], dtype=torch.float64, requires_grad=True)
kl = token_kl_penalty(policy, ref)
d = [[0.0, math.log(2.0), -1.0], [0.0, -1.0, 0.0]]
expected = torch.tensor([[math.exp(x) - x - 1.0 for x in row] for row in d], dtype=torch.float64)
assert_close(kl, expected, atol=1e-12, what="k3 惩罚 exp(d) - d - 1（d = ref - policy）")
assert (kl >= 0).all().item(), f"k3 惩罚对每个词元都应非负，实际最小值 {kl.min().item():.3g}"
kl.sum().backward()
assert ref.grad is None, "参考策略是冻结的，不应接收梯度（对 ref_logps 使用 detach）"
assert policy.grad is not None, "当前策略应接收梯度"
assert_close(policy.grad, 1.0 - torch.exp(torch.tensor(d, dtype=torch.float64)), atol=1e-12,
             what="当前策略的梯度 d/d(policy) [exp(d) - d - 1] = 1 - exp(d)")
expect_value_error(lambda: token_kl_penalty(torch.zeros(2, 3), torch.zeros(2, 4)), "policy_logps 与 ref_logps 同形状")
print("✅ token_kl_penalty 可见测试通过")
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb02_grpo_objective", "test_token_kl_penalty_visible", globals())
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_token_kl_penalty_hidden", "points": 2}
"""隐藏测试：随机形状与 dtype 对照 float64 参考值；梯度对照解析式；参考策略不接收梯度；输出随输入变化。评分时才会出现测试内容。"""
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb02_grpo_objective", "test_token_kl_penalty_hidden", globals())
### END HIDDEN TESTS

# %% [markdown]
# 用你的实现做一次蒙特卡洛实验：从一个 4 个词的 $\pi_\theta$ 里采样 50,000 个词元，比较 k1 与 k3 的均值、标准差，
# 以及单个样本为负的比例，再与精确的 KL 对照。

# %% nbgrader={"locked": true, "grade_id": "demo_kl_samples"}
p_theta = torch.tensor([0.55, 0.25, 0.15, 0.05], dtype=torch.float64)  # [V] current policy
p_ref = torch.tensor([0.40, 0.30, 0.20, 0.10], dtype=torch.float64)    # [V] reference policy
exact_kl = (p_theta * (p_theta.log() - p_ref.log())).sum().item()

tokens = torch.multinomial(p_theta, 50_000, replacement=True, generator=torch.Generator().manual_seed(3))  # [S]
policy_lp, ref_lp = p_theta.log()[tokens], p_ref.log()[tokens]          # [S], [S]
k1 = policy_lp - ref_lp                                                  # [S] -d
k2 = 0.5 * (policy_lp - ref_lp) ** 2                                     # [S] d^2 / 2
k3 = token_kl_penalty(policy_lp, ref_lp)                                 # [S]
print(f"精确 KL(pi_theta || pi_ref) = {exact_kl:.5f}")
for name, est in (("k1", k1), ("k2", k2), ("k3", k3)):
    print(f"{name}: 均值 {est.mean().item():.5f}  标准差 {est.std().item():.4f}  单样本为负的比例 {(est < 0).double().mean().item():.3f}")
standard_error = k3.std().item() / math.sqrt(len(tokens))
assert abs(k3.mean().item() - exact_kl) < 4 * standard_error, "k3 should be an unbiased estimate of the KL"
assert (k3 >= 0).all().item() and (k1 < 0).any().item()
assert k3.std() < k1.std()
assert k2.std() < k3.std(), "here k2 has the smallest spread of the three (and is biased)"
assert abs(k2.mean().item() - exact_kl) > 4 * k2.std().item() / math.sqrt(len(tokens)), "k2 is biased here"

# Exact per-sample standard deviations (sums over V, no sampling) as pi_ref moves away from pi_theta.
print("\n参考策略离当前策略越来越远时（精确计算，不采样）：")
print("  t    | KL(pi_theta||pi_ref) | std(k1) | std(k3)")
direction = torch.tensor([1.0, -0.5, 0.5, 2.5], dtype=torch.float64)    # [V] where pi_ref moves its mass
std_ratio = {}
for t_far in (0.1, 0.5, 1.0, 2.0, 3.0):
    ref_far = torch.log_softmax(p_theta.log() + t_far * direction, dim=-1)          # [V]
    d_far = ref_far - p_theta.log()                                                 # [V]
    k1_far, k3_far = -d_far, token_kl_penalty(p_theta.log(), ref_far)              # [V], [V]
    mean1, mean3 = (p_theta * k1_far).sum(), (p_theta * k3_far).sum()
    std1 = (p_theta * (k1_far - mean1) ** 2).sum().sqrt().item()
    std3 = (p_theta * (k3_far - mean3) ** 2).sum().sqrt().item()
    std_ratio[t_far] = std3 / std1
    print(f"  {t_far:4.1f} | {mean1.item():20.4f} | {std1:7.4f} | {std3:7.4f}")
assert std_ratio[0.1] < 0.2 and std_ratio[3.0] > 1.0, "k3 is low-variance only near pi_ref"

# The same quantities on a fine grid of distances, for the figure.
t_grid = torch.linspace(0.0, 3.0, 61, dtype=torch.float64)                       # [D]
ref_grid = torch.log_softmax(p_theta.log() + t_grid[:, None] * direction, dim=-1)  # [D, V]
d_grid = ref_grid - p_theta.log()                                                # [D, V]
k1_grid, k3_grid = -d_grid, torch.exp(d_grid) - d_grid - 1                       # [D, V]
kl_grid = (p_theta * k1_grid).sum(dim=-1)                                        # [D]
std1_grid = (p_theta * (k1_grid - kl_grid[:, None]) ** 2).sum(dim=-1).sqrt()     # [D]
std3_grid = (p_theta * (k3_grid - (p_theta * k3_grid).sum(dim=-1, keepdim=True)) ** 2).sum(dim=-1).sqrt()  # [D]
crossing = t_grid[int(torch.nonzero(std3_grid > std1_grid)[0])].item()
fig, ax = plt.subplots(figsize=(7, 3.6))
ax.plot(t_grid, std1_grid, "--", label="std of k1 (one sample)")
ax.plot(t_grid, std3_grid, "-", label="std of k3 (one sample)")
ax.plot(t_grid, kl_grid, ":", color="black", label="exact KL(pi_theta || pi_ref)")
ax.axvline(crossing, color="grey", linewidth=0.8)
ax.set(xlabel="t: how far pi_ref has moved from pi_theta", ylabel="value", title="k3 is low-variance only near pi_ref")
ax.legend(fontsize=8)
ax.grid(alpha=0.3)
fig.tight_layout()
plt.show()
print(f"k3 的标准差在 t ≈ {crossing:.2f}（KL ≈ {kl_grid[int(torch.nonzero(std3_grid > std1_grid)[0])].item():.2f}）处超过 k1")

# %% [markdown]
# k1 与 k3 的均值都落在精确值附近，但 k1 有相当一部分样本是负的——把它逐词元加进损失，会在一些词元上"奖励"偏离参考策略；
# k3 每个样本都非负，在这对相距不远的分布上标准差也比 k1 小得多。三者中标准差**最小**的其实是 k2（见上面的输出：
# $d$ 很小时 $d^2/2$ 是比 $e^d-d-1$ 更小的数）——它同样非负，代价是均值偏离了精确值（有偏）。所以选 k3 不是因为它方差最小，
# 而是因为它在无偏的估计量里非负且（在两个策略接近时）方差小。
# 第二张表和图说明 k3 的"低方差"只在 $\pi_\theta \approx \pi_{\text{ref}}$ 时成立（图中灰线是两条标准差曲线的交点）：参考策略越走越远，k3 的标准差先是远小于 k1，
# 最后反超——参考策略把大量概率放在当前策略很少采到的词元上，这些词元一旦被采到，$e^{d}$ 就非常大。

# %% [markdown]
# ### 3.1　用作损失时，三种估计量给出的是哪一个 KL 的梯度？
#
# 估计量的**值**无偏，不等于把它当作损失求导后**梯度**也无偏。训练时样本 $y$ 是采样得到的常数，我们只对
# $\log\pi_\theta(y)$ 求导（不对"采样"这一步求导）。对一个词元，记 $g = \nabla_\theta \log\pi_\theta(y)$，有
#
# | 用作损失 | 单样本梯度 | 期望（$y\sim\pi_\theta$） |
# | --- | --- | --- |
# | k1 $=\log\pi_\theta-\log\pi_{\text{ref}}$ | $g$ | $\mathbb{E}[g]=0$：**没有任何约束力** |
# | k2 $=\tfrac12(\log\pi_\theta-\log\pi_{\text{ref}})^2$ | $(\log\pi_\theta-\log\pi_{\text{ref}})\,g$ | $\nabla_\theta\,\mathrm{KL}(\pi_\theta\,\|\,\pi_{\text{ref}})$（反向 KL，目标里写的那个） |
# | k3 $=e^{d}-d-1$ | $(1-\pi_{\text{ref}}/\pi_\theta)\,g$ | $\nabla_\theta\,\mathrm{KL}(\pi_{\text{ref}}\,\|\,\pi_\theta)$（**正向** KL） |
# | 概率比 × k3（TRL `use_bias_correction_kl=True`） | $(\log\pi_\theta-\log\pi_{\text{ref}})\,g$（在 $\rho=1$ 处） | $\nabla_\theta\,\mathrm{KL}(\pi_\theta\,\|\,\pi_{\text{ref}})$ |
#
# 原因：反向 KL 的期望是对 $\pi_\theta$ 本身取的，它的梯度有两部分——估计量自身的梯度，加上"采样分布随 $\theta$ 变化"
# 的得分函数项 $k\cdot g$。直接对 k3 求导只拿到第一部分，结果恰好是正向 KL 的梯度。乘以概率比
# $\rho=\pi_\theta/\pi_{\text{old}}$（值为 1，但可导）后，$\nabla(\rho\,k_3) = k_3\,g + \nabla k_3$，补回了第二部分；
# 样本来自 $\pi_{\text{old}}\neq\pi_\theta$ 时，这个概率比也正是重要性采样需要的权重。这就是 TRL 文档所说的
# "让 KL 梯度成为无偏的反向 KL 梯度"（TRL 1.16 引用 DeepSeek-V3.2 的论文）。
#
# 下面用蒙特卡洛验证这张表：一个 4 个词的策略，采样 200,000 个词元，把每种估计量的样本均值当作损失求梯度，
# 与精确的两个 KL 梯度比较。

# %% nbgrader={"locked": true, "grade_id": "demo_score_function"}
theta = torch.tensor([0.8, 0.1, -0.4, -1.5], dtype=torch.float64, requires_grad=True)   # [V] policy logits
log_p_ref = torch.log(torch.tensor([0.15, 0.25, 0.35, 0.25], dtype=torch.float64))       # [V] reference
log_p = torch.log_softmax(theta, dim=-1)                                                 # [V]
(grad_reverse,) = torch.autograd.grad((log_p.exp() * (log_p - log_p_ref)).sum(), theta)  # grad KL(pi_theta || pi_ref)
log_p = torch.log_softmax(theta, dim=-1)
(grad_forward,) = torch.autograd.grad((log_p_ref.exp() * (log_p_ref - log_p)).sum(), theta)  # grad KL(pi_ref || pi_theta)

samples = torch.multinomial(log_p.detach().exp(), 200_000, replacement=True,
                            generator=torch.Generator().manual_seed(5))                # [S] y ~ pi_theta
mc_grads = {}
for name in ("k1", "k2", "k3", "ratio * k3"):
    lp = torch.log_softmax(theta, dim=-1)[samples]                                     # [S] log pi_theta(y)
    rp = log_p_ref[samples]                                                            # [S] log pi_ref(y)
    if name == "k1":
        per_sample = lp - rp
    elif name == "k2":
        per_sample = 0.5 * (lp - rp) ** 2
    elif name == "k3":
        per_sample = token_kl_penalty(lp, rp)
    else:
        per_sample = torch.exp(lp - lp.detach()) * token_kl_penalty(lp, rp)          # value 1 * k3, differentiable
    (mc_grads[name],) = torch.autograd.grad(per_sample.mean(), theta)

print("精确梯度  反向 KL(pi_theta||pi_ref):", [round(g, 4) for g in grad_reverse.tolist()])
print("精确梯度  正向 KL(pi_ref||pi_theta):", [round(g, 4) for g in grad_forward.tolist()])
for name, grad in mc_grads.items():
    print(f"{name:>10} 作为损失的蒙特卡洛梯度: {[round(g, 4) for g in grad.tolist()]}   "
          f"距反向 {max_abs_diff(grad, grad_reverse):.4f}，距正向 {max_abs_diff(grad, grad_forward):.4f}")
tolerance = 0.01  # several Monte-Carlo standard errors at S = 200,000
assert max_abs_diff(grad_reverse, grad_forward) > 10 * tolerance, "pick distributions whose two KL gradients differ"
assert mc_grads["k1"].abs().max().item() < tolerance
assert max_abs_diff(mc_grads["k2"], grad_reverse) < tolerance
assert max_abs_diff(mc_grads["k3"], grad_forward) < tolerance
assert max_abs_diff(mc_grads["ratio * k3"], grad_reverse) < tolerance

# %% [markdown]
# 结论与表一致：k1 作为损失的梯度在期望上是 0；k2 与"概率比 × k3"给出反向 KL 的梯度；单独的 k3 给出的是正向 KL 的梯度。
# 两者在 $\pi_\theta \approx \pi_{\text{ref}}$ 时几乎相同（两个 KL 在那里有相同的二阶展开），相差很远时才分开。
#
# ### 3.2　TRL 的偏差校正：损失值不变，梯度变了
#
# 在线训练（TRL 默认每批只更新一次）时旧策略就是当前策略，概率比的值恰好为 1，所以"概率比 × k3"的**损失值**与 k3 完全相同，
# 日志里看不出差别；但概率比是可导的，梯度不同。下面在一个随机批次上当场测量：

# %%
bc_gen = torch.Generator().manual_seed(21)
bc_new = (-torch.rand(6, 5, generator=bc_gen, dtype=torch.float64) * 3).requires_grad_(True)  # [N, T]
bc_ref = bc_new.detach() + torch.randn(6, 5, generator=bc_gen, dtype=torch.float64) * 0.3    # [N, T]
bc_ratio = torch.exp(bc_new - bc_new.detach())                        # [N, T] on-policy: exactly 1, differentiable
plain_kl = token_kl_penalty(bc_new, bc_ref).mean(dim=-1).mean()       # use_bias_correction_kl=False
corrected_kl = (bc_ratio * token_kl_penalty(bc_new, bc_ref)).mean(dim=-1).mean()  # use_bias_correction_kl=True
(grad_plain,) = torch.autograd.grad(plain_kl, bc_new)
(grad_corrected,) = torch.autograd.grad(corrected_kl, bc_new)
print(f"KL 项的值：不校正 {plain_kl.item():.6f}，校正 {corrected_kl.item():.6f}，差 {abs(plain_kl - corrected_kl).item():.1e}")
print(f"KL 项的梯度：最大逐元素差 {max_abs_diff(grad_plain, grad_corrected):.3e}")
assert plain_kl.item() == corrected_kl.item()
assert max_abs_diff(grad_plain, grad_corrected) > 1e-4
# Per token: d k3 / d new = 1 - exp(d); with the ratio it becomes k3 + 1 - exp(d) = new - ref (k2's gradient).
assert_close(grad_plain * 30, 1 - torch.exp(bc_ref - bc_new.detach()), atol=1e-12, what="不校正时的逐词元梯度")
assert_close(grad_corrected * 30, bc_new.detach() - bc_ref, atol=1e-12, what="校正后的逐词元梯度")

# %% [markdown]
# 本课的 `compute_grpo_loss` 用不校正的 k3，对应 TRL 的 `use_bias_correction_kl=False`（MiniMind 也是如此）；
# 第 3b 课把 `True` 的情况也放进与 TRL 的一致性核对。
#
# **实践中 β 取多大？** 只列出处可查的：DeepSeekMath（Shao et al., 2024，第 4.2 节）训练 GRPO 时 KL 系数为 0.04；
# TRL 1.16 的 `GRPOConfig.beta` 文档写明 DeepSeek-R1（Guo et al., 2025）用 0.001。DAPO（Yu et al., 2025）与
# Dr. GRPO（Liu et al., 2025）则**去掉了 KL 项**：在可验证奖励的长推理训练里，策略本来就需要离初始模型走得很远，
# 裁剪已经限制了每一步，KL 项主要是代价（要多一个参考模型）。TRL 的默认 `beta=0.0` 跟随的正是这一做法。

# %% [markdown]
# ## 第 4 步　回答掩码与候选等权
#
# 一批回答被填充（padding）到同一长度 $T$，`response_mask`（TRL 中叫 `completion_mask`）标出每个回答的有效词元：
# 提示、填充位置以及 EOS 之后的内容都是 `False`。第 5 课会在真实模型上从 EOS 构造这个掩码，这里它是输入。
#
# 有效词元上的逐词元损失是 $\ell_{i,t} = -s_{i,t} + \beta\, \widehat{\mathrm{KL}}_{i,t}$（$\beta=0$ 或没有参考策略时 KL 项不存在）。
# 怎样把它们汇总成一个数？GRPO（也是 TRL 的 `loss_type="grpo"`、MiniMind 的做法）是**先在每个回答内部平均，再在回答之间平均**：
#
# $$\mathcal{L}_{\text{GRPO}} = \frac{1}{N}\sum_{i=1}^{N} \frac{1}{\sum_t m_{i,t}} \sum_{t} m_{i,t}\, \ell_{i,t}.$$
#
# 另一种看起来同样自然的做法是把批次里所有有效词元放在一起平均（词元平均，TRL 的 `bnpo`、`dapo` 属于这一类）：
# $\sum_{i,t} m_{i,t}\ell_{i,t} / \sum_{i,t} m_{i,t}$。两者给每个词元的权重不同：
#
# - 候选等权：回答 $i$ 的每个词元权重 $\frac{1}{N\,|y_i|}$，每个回答的总权重都是 $\frac1N$；
# - 词元平均：每个词元权重相同 $\frac{1}{\sum_j |y_j|}$，回答的总权重与它的长度成正比。
#
# 下图用一组两个回答算出这两种权重：一个 3 个词元的短回答，一个 12 个词元的长回答。

# %% nbgrader={"locked": true, "grade_id": "demo_length_weights"}
lengths = torch.tensor([3, 12])                                                   # [N] valid tokens per answer
T_max = int(lengths.max())
mask_demo = torch.arange(T_max).unsqueeze(0) < lengths.unsqueeze(1)               # [N, T] prefix masks
num_answers = mask_demo.shape[0]
m = mask_demo.double()
w_candidate = m / (num_answers * m.sum(dim=1, keepdim=True))                        # [N, T] per-candidate mean
w_token = m / m.sum()                                                               # [N, T] token mean
for w in (w_candidate, w_token):
    assert_close(w.sum(), 1.0, atol=1e-12, what="权重总和")

fig, (ax_tok, ax_ans) = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw={"width_ratios": [2, 1]})
positions = torch.arange(T_max)
for row, (name, color) in enumerate((("short answer (3 tokens)", "tab:green"), ("long answer (12 tokens)", "tab:red"))):
    valid = mask_demo[row]
    ax_tok.bar((positions[valid] + 0.2 * (row * 2 - 1)).tolist(), w_candidate[row][valid].tolist(), width=0.4,
               color=color, label=f"{name}, per-candidate mean")
ax_tok.axhline(w_token[mask_demo].max().item(), color="black", linestyle="--",
               label=f"token mean: every token 1/{int(m.sum())}")
ax_tok.set(xlabel="token position t", ylabel="weight of one token in the loss", title="Per-token weight")
ax_tok.legend(fontsize=7)
x_ans = torch.arange(num_answers).float()
ax_ans.bar((x_ans - 0.2).tolist(), w_candidate.sum(dim=1).tolist(), width=0.4, label="per-candidate mean (GRPO)")
ax_ans.bar((x_ans + 0.2).tolist(), w_token.sum(dim=1).tolist(), width=0.4, label="token mean")
ax_ans.set_xticks(x_ans.tolist(), ["short (3)", "long (12)"])
ax_ans.set(ylabel="total weight of the answer", title="Per-answer weight")
ax_ans.legend(fontsize=7)
fig.tight_layout()
plt.show()

print("候选等权：每个词元的权重 =", [round(w, 4) for w in w_candidate.amax(dim=1).tolist()],
      " 每个回答的总权重 =", w_candidate.sum(dim=1).tolist())
print("词元平均：每个词元的权重 =", [round(w, 4) for w in w_token.amax(dim=1).tolist()],
      " 每个回答的总权重 =", w_token.sum(dim=1).tolist())

# %% [markdown]
# 候选等权下，短回答的每个词元权重是长回答的 4 倍，但两个回答的总权重相同；词元平均下则反过来，长回答占了 80%。
# 两种做法各有偏差：
#
# - 候选等权让"一个回答"成为学习单位，与优势 $A_i$ 是候选级的这一点一致；但同样的 $A_i$ 分摊到更多词元上，
#   **长的错误回答每个词元受到的惩罚更轻**，短的正确回答每个词元受到的鼓励更强——Dr. GRPO 指出这会助长错误回答越写越长。
# - 词元平均没有这种按长度摊薄的效应，但长回答在批次里的话语权更大。
#
# 本课程（与 DeepSeekMath 的原始 GRPO、TRL 的 `loss_type="grpo"`、MiniMind 相同）使用候选等权。第 3 课会把 `bnpo`、`dr_grpo`、`dapo` 等变体放在一起比较。
#
# 回顾这一课出现的约束，它们各管一件事：
#
# | 约束 | 比较的对象 | 作用 | 缺了它会怎样 |
# | --- | --- | --- | --- |
# | 组内优势 | 同一提示的候选奖励 | 去掉题目之间共同的基线与尺度 | 题目难度和奖励尺度主导更新方向 |
# | 裁剪 | 当前策略与采样策略 | 限制一次更新的概率比 | 一步走得太远，旧样本上的估计失效 |
# | 参考 KL | 当前策略与参考策略 | 限制多次更新后的长期漂移 | 奖励投机、原有能力退化 |
# | 回答掩码 | 有效回答词元 | 排除提示与填充 | 无关位置污染目标与梯度 |
# | 候选等权 | 回答之间 | 每个回答对损失的总贡献相同 | 长回答因为词元多而主导更新 |

# %% [markdown]
# ## 第 5 步　组装完整的 GRPO 损失
#
# 把前面的部分放在一起，对有效词元：
#
# $$\rho_{i,t}=\exp(\log\pi_\theta-\log\pi_{\text{old}}),\quad
# s_{i,t}=\min\big(\rho_{i,t}A_i,\ \operatorname{clip}(\rho_{i,t},1-\epsilon,1+\epsilon)A_i\big),\quad
# \ell_{i,t}=-s_{i,t}+\beta\,\big(e^{d_{i,t}}-d_{i,t}-1\big),$$
#
# $$\mathcal{L}=\frac{1}{N}\sum_{i}\frac{\sum_t m_{i,t}\,\ell_{i,t}}{\sum_t m_{i,t}}.$$
#
# 奖励全等的组与单元素组 $A_i = 0$，它们的策略项为 0，不会凭空制造更新方向（KL 项仍然作用于它们）。
#
# ### TODO 2　实现 `compute_grpo_loss`
#
# 签名与返回值：`compute_grpo_loss(log_probs_new, log_probs_old, rewards, group_ids, response_mask=None, clip_range=0.2,
# eps=1e-6, log_probs_ref=None, beta=0.0) -> (loss, advantages)`。`loss` 是 0 维张量，`advantages` 是上面
# `compute_group_advantages(rewards, group_ids, eps)` 的结果。
#
# 1. **输入检查**：先调用下面提供的（只读）`check_grpo_inputs(...)`，它检查形状、数值参数、有限性与掩码，
#    并返回 `(mask, clip_range, beta)`；`response_mask=None` 表示全部有效。
#    **掩码必须是布尔张量**：这个函数沿用参考章节的输入契约（“response_mask 必须是同形布尔张量”），
#    `float` 或 `int` 的 0/1 掩码会被拒绝（`ValueError`），请先 `.bool()`。这是约定卡 C1 的唯一例外，原因见约定卡。
#    同样沿用章节契约：给出的 `log_probs_ref` 即使 `beta == 0` 也要与 `log_probs_new` 同形状、全部有限。
#    它**不**检查两条与本课内容有关的契约，这两条由你写，各抛出中文说明的 `ValueError`：
#    - `beta > 0` 却没有给 `log_probs_ref`（约定卡 C2：没有参考策略就无法计算 KL，不能悄悄忽略）；`beta == 0` 时不计算 KL；
#    - 某个候选一个有效词元都没有（约定卡 C5：它在自己的有效词元上没有均值）。
# 2. **概率比**：旧策略不接收梯度（`detach`）。**先用掩码把无效位置的对数概率比换成 0，再取 `exp`**（约定卡 C3）。
# 3. **逐词元损失**：把 `advantages` 广播到词元维（`unsqueeze(-1)`），取裁剪目标的相反数；
#    `beta > 0` 时加上 `beta * token_kl_penalty(...)`，KL 的输入同样先在无效位置处理好（让那里的 $d=0$），再求 k3。
# 4. **汇总**：只统计有效词元，先在每个候选内部求均值，再对候选求均值。
#
# 提示：`log_ratio = torch.where(mask, log_probs_new - log_probs_old.detach(), 0.0)`，然后 `ratio = torch.exp(log_ratio)`。
# 为什么不能先 `exp` 再清零？无效位置上若有一个很大的有限值（例如 800），`exp(800)` 是 `inf`；
# 前向时 `torch.where` 或乘以掩码都能把它挡在损失之外，但反向传播时链式法则要计算 $0 \times e^{800} = 0 \times \infty$ = NaN，
# 整个梯度就被污染了。下面的可见测试会在无效位置放入 800 检查这一点。

# %% nbgrader={"locked": true, "grade_id": "provided_grpo_input_checks"}
#@save
import math
import numbers

import torch


def check_grpo_inputs(log_probs_new, log_probs_old, rewards, group_ids, response_mask=None, clip_range=0.2,
                      eps=1e-6, log_probs_ref=None, beta=0.0):
    """提供的输入检查（只读）：返回 (布尔掩码 [N, T], clip_range, beta)，违反契约时抛出中文 ValueError。

    不检查两条契约（由 compute_grpo_loss 自己检查）：beta > 0 时必须给出 log_probs_ref（约定卡 C2），
    以及每个候选至少一个有效词元（约定卡 C5）。给出的 log_probs_ref 即使 beta == 0 也检查形状与有限性；
    response_mask 必须是布尔张量（章节契约，约定卡 C1 的例外）。
    """
    def finite_number(value, name, positive=False):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise ValueError(f"输入契约：{name} 必须是有限的实数，实际为 {value!r}")
        if value < 0 or (positive and value == 0):
            raise ValueError(f"输入契约：{name} 必须是{'正' if positive else '非负'}数，实际为 {value!r}")
        return float(value)

    if not torch.is_tensor(log_probs_new) or log_probs_new.ndim != 2 or log_probs_new.numel() == 0:
        raise ValueError("输入契约：log_probs_new 必须是非空的二维张量 [N, T]")
    if not torch.is_tensor(log_probs_old) or log_probs_old.shape != log_probs_new.shape:
        raise ValueError("输入契约：log_probs_old 必须与 log_probs_new 同形状 [N, T]")
    num_candidates = log_probs_new.shape[0]
    if not torch.is_tensor(rewards) or rewards.ndim != 1 or rewards.shape[0] != num_candidates:
        raise ValueError(f"输入契约：rewards 必须是长度为候选数 {num_candidates} 的一维张量")
    if not torch.is_tensor(group_ids) or group_ids.shape != rewards.shape:
        raise ValueError("输入契约：group_ids 必须与 rewards 同形状 [N]")
    if not rewards.is_floating_point() or not torch.isfinite(rewards).all():
        raise ValueError("输入契约：rewards 必须是浮点张量，且全部是有限数（不含 NaN / inf）")
    clip_range = finite_number(clip_range, "clip_range")
    beta = finite_number(beta, "beta")
    finite_number(eps, "eps", positive=True)
    if not torch.isfinite(log_probs_new).all() or not torch.isfinite(log_probs_old).all():
        raise ValueError("输入契约：log_probs_new 与 log_probs_old 必须全部是有限数（无效位置请填 0，而不是 -inf）")
    if log_probs_ref is not None:  # checked whenever given, also with beta == 0 (the chapter's contract)
        if not torch.is_tensor(log_probs_ref) or log_probs_ref.shape != log_probs_new.shape:
            raise ValueError("输入契约：参考策略 log_probs_ref 必须与 log_probs_new 同形状 [N, T]")
        if not torch.isfinite(log_probs_ref).all():
            raise ValueError("输入契约：参考策略 log_probs_ref 必须全部是有限数")
    if response_mask is None:
        return torch.ones_like(log_probs_new, dtype=torch.bool), clip_range, beta  # [N, T]
    if not torch.is_tensor(response_mask) or response_mask.shape != log_probs_new.shape:
        raise ValueError("输入契约：response_mask 必须是与 log_probs_new 同形状 [N, T] 的布尔张量")
    if response_mask.dtype != torch.bool:
        raise ValueError(
            f"输入契约：response_mask 必须是同形布尔张量，实际 dtype 为 {response_mask.dtype}；"
            "0/1 数值掩码请先用 .bool() 转换（约定卡 C1 的例外：第 2 课沿用章节的契约）"
        )
    return response_mask, clip_range, beta  # [N, T] bool

# %% nbgrader={"solution": true, "grade_id": "compute_grpo_loss"}
#@save
def compute_grpo_loss(log_probs_new, log_probs_old, rewards, group_ids, response_mask=None, clip_range=0.2,
                      eps=1e-6, log_probs_ref=None, beta=0.0):
    """GRPO 损失：组内优势 + 逐词元裁剪目标 + 可选参考 KL，先在每个候选的有效词元上求均值，再对候选求均值。

    Args:
        log_probs_new: 当前策略的逐词元对数概率 [N, T]（带梯度）。
        log_probs_old: 采样时旧策略在同一位置的对数概率 [N, T]（不接收梯度）。
        rewards: 每个候选的奖励 [N]。
        group_ids: 每个候选所属提示的整数组号 [N]。
        response_mask: 有效回答词元的布尔掩码 [N, T]（章节契约：不接受 0/1 数值掩码）；None 表示全部有效。
        clip_range: 概率比的裁剪半径 epsilon（非负有限数）。
        eps: 组内标准差的下限（正的有限数）。
        log_probs_ref: 参考策略的对数概率 [N, T]（可选，不接收梯度）。
        beta: 参考 KL 的权重（非负有限数）；为 0 时不加 KL，> 0 时必须给出 log_probs_ref。

    Returns:
        (loss, advantages)：0 维损失张量与 [N] 的组内优势。
    """
    ### BEGIN SOLUTION
    mask, clip_range, beta = check_grpo_inputs(log_probs_new, log_probs_old, rewards, group_ids, response_mask,
                                               clip_range, eps, log_probs_ref, beta)  # mask: [N, T] bool
    if beta > 0 and log_probs_ref is None:
        raise ValueError("输入契约：beta > 0 时必须给出参考策略的对数概率 log_probs_ref（约定卡 C2）")
    lengths = mask.sum(dim=-1)                                                    # [N] valid tokens per candidate
    if not (lengths > 0).all():
        raise ValueError("输入契约：每个候选至少要有一个有效词元（response_mask 某一行全为 0；约定卡 C5）")

    advantages = compute_group_advantages(rewards, group_ids, eps=eps)            # [N] (also checks rewards)

    zeros = torch.zeros_like(log_probs_new)                                       # [N, T]
    log_ratio = torch.where(mask, log_probs_new - log_probs_old.detach(), zeros)  # [N, T] masked BEFORE exp
    ratio = torch.exp(log_ratio)                                                  # [N, T] exactly 1 where masked
    clipped_ratio = ratio.clamp(1.0 - clip_range, 1.0 + clip_range)               # [N, T]
    token_advantages = advantages.detach().to(ratio.dtype).unsqueeze(-1)          # [N, 1]
    per_token_loss = -torch.minimum(ratio * token_advantages, clipped_ratio * token_advantages)  # [N, T]
    if beta > 0:
        ref = log_probs_ref.detach()                                              # [N, T] frozen
        policy_for_kl = torch.where(mask, log_probs_new, ref)                     # [N, T] d = 0 where masked
        per_token_loss = per_token_loss + beta * token_kl_penalty(policy_for_kl, ref)  # [N, T]

    per_token_loss = torch.where(mask, per_token_loss, zeros)                     # [N, T]
    per_candidate = per_token_loss.sum(dim=-1) / lengths.to(per_token_loss.dtype)  # [N] mean over valid tokens
    return per_candidate.mean(), advantages
    ### END SOLUTION


# %% [markdown]
# 下面三个可见测试分别检查：组内优势与一个可以手算的损失值；裁剪、KL 与梯度隔离；候选等权与输入契约。
# 固定的测试数据：5 个候选分成 3 组（最后一个是单元素组），长度 2 的回答中有两个只有 1 个有效词元。

# %%
def grpo_fixture():
    """5 candidates in 3 groups (the last one a singleton), T = 2, two answers with a single valid token."""
    new = torch.tensor([[-1.0, -0.5], [-0.5, -0.7], [-1.5, -0.4], [-0.2, -0.9], [-0.8, -1.0]], requires_grad=True)
    old = torch.tensor([[-1.1, -0.4], [-0.4, -0.8], [-1.6, -0.5], [-0.3, -0.8], [-0.8, -1.1]], requires_grad=True)
    ref = torch.tensor([[-1.2, -0.7], [-0.8, -0.9], [-1.7, -0.8], [-0.6, -1.1], [-0.9, -1.2]], requires_grad=True)
    rewards = torch.tensor([1.0, 2.0, 0.5, 1.5, 3.0])
    group_ids = torch.tensor([0, 0, 1, 1, 2])
    mask = torch.tensor([[True, True], [True, False], [True, True], [True, True], [True, False]])
    return new, old, ref, rewards, group_ids, mask


# %% nbgrader={"grade": true, "grade_id": "test_grpo_advantages_and_value_visible", "points": 2}
"""检查 compute_grpo_loss：返回的组内优势（多组、单元素组）、一个可以手算的裁剪损失值及其梯度、新旧对数概率共享计算图时的梯度（可见测试）。"""
new, old, ref, rewards, group_ids, mask = grpo_fixture()
loss, advantages = compute_grpo_loss(new, old, rewards, group_ids, mask)
assert_close(advantages, torch.tensor([-1.0, 1.0, -1.0, 1.0, 0.0]), atol=1e-6, what="fixture 的组内优势")
assert advantages[-1].item() == 0.0, "单元素组没有可比较的对象，优势应严格为 0"
assert loss.ndim == 0 and torch.isfinite(loss).item(), f"损失应是有限的 0 维张量，实际形状 {tuple(loss.shape)}"

# Two candidates, one token each, rewards [0, 1] -> A = [-1, +1]; both ratios are 1.5 with clip_range 0.2.
# Candidate 0 (A < 0): min(-1.5, -1.2) = -1.5, unclipped, gradient flows.
# Candidate 1 (A > 0): min(1.5, 1.2) = 1.2, clipped, zero gradient.
# loss = -(-1.5 + 1.2) / 2 = 0.15; d loss / d new[0] = -(1/2) * A * rho = 0.75; d loss / d new[1] = 0.
new2 = torch.full((2, 1), math.log(1.5), dtype=torch.float64, requires_grad=True)
old2 = torch.zeros(2, 1, dtype=torch.float64)
loss2, adv2 = compute_grpo_loss(new2, old2, torch.tensor([0.0, 1.0], dtype=torch.float64), torch.tensor([4, 4]))
assert_close(adv2, torch.tensor([-1.0, 1.0]), atol=1e-9, what="两候选组的优势")
assert_close(loss2, 0.15, atol=1e-9, what="手算的裁剪损失 -(min(-1.5, -1.2) + min(1.5, 1.2)) / 2")
loss2.backward()
assert_close(new2.grad, torch.tensor([[0.75], [0.0]], dtype=torch.float64), atol=1e-9,
             what="梯度：A<0 且比率过大时照常惩罚（0.75），A>0 且比率超过 1+epsilon 时被裁剪（0）")

# Old log-probs computed in the same graph as the new ones (TRL does this when it updates once per batch).
shared = torch.tensor([[-0.4, -1.0], [-0.9, -0.2]], dtype=torch.float64, requires_grad=True)
loss_shared, _ = compute_grpo_loss(shared * 1.0, shared * 1.0, torch.tensor([1.0, 0.0], dtype=torch.float64),
                                   torch.tensor([0, 0]))
(grad_shared,) = torch.autograd.grad(loss_shared, shared)
assert grad_shared.abs().max().item() > 0, (
    "新旧对数概率来自同一计算图时梯度全为 0：是否忘了对 log_probs_old 使用 detach()？"
    "没有 detach 时概率比恒等于 1，梯度恰好消失（见第 1 步）")
assert_close(grad_shared, torch.tensor([[-0.25, -0.25], [0.25, 0.25]], dtype=torch.float64), atol=1e-12,
             what="比率为 1 时的策略梯度 -A_i / (N |y_i|)")
print("✅ 组内优势与手算损失值测试通过")
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb02_grpo_objective", "test_grpo_advantages_and_value_visible", globals())
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_grpo_clip_kl_gradient_visible", "points": 2}
"""检查 compute_grpo_loss：参考 KL 只在 beta > 0 时加入（此时必须给出参考策略）、非负且按候选等权汇总；旧策略与参考策略不接收梯度；无效位置上的大数值（800）不影响损失与梯度（可见测试）。"""
new, old, ref, rewards, group_ids, mask = grpo_fixture()
loss_plain, _ = compute_grpo_loss(new, old, rewards, group_ids, mask)
loss_beta0, _ = compute_grpo_loss(new, old, rewards, group_ids, mask, log_probs_ref=ref, beta=0.0)
loss_kl, _ = compute_grpo_loss(new, old, rewards, group_ids, mask, log_probs_ref=ref, beta=0.1)
assert_close(loss_beta0, loss_plain, atol=1e-7, what="beta=0 时不应加入 KL 项（给出的参考策略被忽略）")
expect_value_error(lambda: compute_grpo_loss(new, old, rewards, group_ids, mask, beta=0.1),
                   "beta > 0 时必须给出 log_probs_ref（约定卡 C2）")
kl_tokens = token_kl_penalty(new.detach(), ref.detach())  # [N, T]
kl_per_candidate = (kl_tokens * mask).sum(dim=1) / mask.sum(dim=1)
assert_close(loss_kl - loss_plain, 0.1 * kl_per_candidate.mean(), atol=1e-6,
             what="加入的 KL 项应为 beta × (每个候选有效词元上 KL 的均值，再对候选求均值)")
assert loss_kl.item() >= loss_plain.item(), "非负的 KL 项不应降低损失"
loss_kl.backward()
assert new.grad is not None and torch.isfinite(new.grad).all().item(), "当前策略应接收有限的梯度"
assert old.grad is None, "采样时的旧策略是数据，不应接收梯度（对 log_probs_old 使用 detach）"
assert ref.grad is None, "参考策略是冻结的，不应接收梯度"
assert new.grad[1, 1].item() == 0.0 and new.grad[4, 1].item() == 0.0, "无效位置（mask 为 False）不应有梯度"

# Large finite values on masked positions (C3): loss and gradient finite and unchanged.
base_grad = new.grad.clone()
for name, value in (("log_probs_new", 800.0), ("log_probs_old", -800.0), ("log_probs_ref", 800.0)):
    moved = {"log_probs_new": new.detach().clone(), "log_probs_old": old.detach().clone(),
             "log_probs_ref": ref.detach().clone()}
    moved[name][~mask] = value  # [N, T] only masked positions change
    moved_new = moved["log_probs_new"].requires_grad_(True)
    loss_moved, _ = compute_grpo_loss(moved_new, moved["log_probs_old"], rewards, group_ids, mask,
                                      log_probs_ref=moved["log_probs_ref"], beta=0.1)
    loss_moved.backward()
    assert torch.isfinite(loss_moved).item() and torch.isfinite(moved_new.grad).all().item(), (
        f"无效位置上的 {name} 为 {value} 时损失或梯度不是有限数（梯度含 NaN）：是否先 exp 再用掩码清零？"
        "应先把无效位置的对数概率比（与 KL 的输入）换成 0，再取 exp（约定卡 C3）")
    assert_close(loss_moved, loss_kl.detach(), atol=1e-6, what=f"无效位置上的 {name} 改为 {value} 后的损失（应不变）")
    assert_close(moved_new.grad, base_grad, atol=1e-6, what=f"无效位置上的 {name} 改为 {value} 后的梯度（应不变）")
print("✅ 裁剪、参考 KL、梯度隔离与无效位置上的大数值测试通过")
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb02_grpo_objective", "test_grpo_clip_kl_gradient_visible", globals())
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_grpo_weighting_contract_visible", "points": 2}
"""检查 compute_grpo_loss：长短不同的候选先各自求均值再等权；response_mask=None 表示全部有效；掩码必须是布尔张量（章节契约，0/1 数值掩码抛出 ValueError）；输入契约（可见测试）。"""
# At ratio 1 every candidate's objective is A_i, and a group's advantages sum to zero: with per-candidate
# averaging the loss is exactly 0 whatever the lengths; a token mean would weight the long answer more.
zeros = torch.zeros(2, 2)
loss_eq, _ = compute_grpo_loss(zeros, zeros, torch.tensor([0.0, 2.0]), torch.tensor([0, 0]),
                               torch.tensor([[True, True], [True, False]]))
assert abs(loss_eq.item() - 1.0 / 3.0) > 1e-6, (
    f"损失为 {loss_eq.item():.6f} = 1/3：这正是词元平均（所有有效词元放在一起平均）的结果。"
    "是否用了 mask.sum() 作分母而不是先对每个候选求均值？")
assert_close(loss_eq, 0.0, atol=1e-7, what="长短候选应先各自在有效词元上求均值再等权（词元平均会得到 1/3）")
new, old, ref, rewards, group_ids, _ = grpo_fixture()
full = torch.ones(5, 2, dtype=torch.bool)
assert_close(compute_grpo_loss(new, old, rewards, group_ids)[0], compute_grpo_loss(new, old, rewards, group_ids, full)[0],
             atol=1e-7, what="response_mask=None 应等同于全部有效")
new, old, ref, rewards, group_ids, mask = grpo_fixture()
for mask_dtype in (torch.float32, torch.float64, torch.long, torch.uint8):
    expect_value_error(lambda: compute_grpo_loss(new, old, rewards, group_ids, mask.to(mask_dtype)),
                       f"response_mask 必须是同形布尔张量（{mask_dtype} 的 0/1 掩码；章节契约，约定卡 C1 的例外）")

new, old, ref, rewards, group_ids, mask = grpo_fixture()
bad_rewards = torch.tensor([float("nan"), 2.0, 0.5, 1.5, 3.0])
no_valid = mask.clone()
no_valid[2] = False
with_inf = old.detach().clone()
with_inf[0, 1] = float("-inf")
invalid_calls = {
    "log_probs_new 是非空二维张量": lambda: compute_grpo_loss(new[0], old[0], rewards[:1], group_ids[:1]),
    "新旧对数概率同形状": lambda: compute_grpo_loss(new, old[:-1], rewards, group_ids, mask),
    "rewards 长度等于候选数": lambda: compute_grpo_loss(new, old, rewards[:-1], group_ids[:-1], mask),
    "group_ids 与 rewards 同形状": lambda: compute_grpo_loss(new, old, rewards, group_ids[:-1], mask),
    "eps 为正": lambda: compute_grpo_loss(new, old, rewards, group_ids, mask, eps=0.0),
    "参考策略同形状": lambda: compute_grpo_loss(new, old, rewards, group_ids, mask, log_probs_ref=ref[:-1], beta=0.1),
    "参考策略同形状（beta = 0 时也检查）": lambda: compute_grpo_loss(new, old, rewards, group_ids, mask, log_probs_ref=ref[:-1]),
    "beta > 0 时必须给出参考策略": lambda: compute_grpo_loss(new, old, rewards, group_ids, mask, beta=0.04),
    "beta 非负": lambda: compute_grpo_loss(new, old, rewards, group_ids, mask, beta=-0.1),
    "clip_range 非负": lambda: compute_grpo_loss(new, old, rewards, group_ids, mask, clip_range=-0.2),
    "clip_range 有限": lambda: compute_grpo_loss(new, old, rewards, group_ids, mask, clip_range=float("inf")),
    "response_mask 是布尔张量（0.5）": lambda: compute_grpo_loss(new, old, rewards, group_ids, mask.float() * 0.5),
    "response_mask 同形状": lambda: compute_grpo_loss(new, old, rewards, group_ids, mask[:, :1]),
    "每个候选至少一个有效词元": lambda: compute_grpo_loss(new, old, rewards, group_ids, no_valid),
    "rewards 为有限数": lambda: compute_grpo_loss(new, old, bad_rewards, group_ids, mask),
    "对数概率为有限数": lambda: compute_grpo_loss(new, with_inf, rewards, group_ids, mask),
}
for contract, call in invalid_calls.items():
    expect_value_error(call, contract)
print(f"✅ 候选等权与 {len(invalid_calls)} 条输入契约测试通过")
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb02_grpo_objective", "test_grpo_weighting_contract_visible", globals())
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_compute_grpo_loss_hidden", "points": 6}
"""隐藏测试：随机的批次（多种规模、无序与负组号、变长与非前缀掩码、float32 与 float64、不同 clip_range 与 beta）对照 float64 逐词元参考实现；梯度对照解析式与有限差分；旧策略与参考策略不接收梯度；无效位置上的大数值不影响损失与梯度；0/1 数值掩码被拒绝（章节契约）；输入契约。评分时才会出现测试内容。"""
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb02_grpo_objective", "test_compute_grpo_loss_hidden", globals())
### END HIDDEN TESTS

# %% [markdown]
# ## 第 6 步　用自动求导核对：一次完整的前向
#
# 最后把数字串起来看一遍，像读训练日志那样：分组奖励、组内优势、概率比的范围、裁剪比例、KL 的均值和损失。
# 然后用自动求导核对第 4 步的权重：在 $\rho = 1$ 处，损失对第 $i$ 个回答每个有效词元的梯度应该恰好是
# $-A_i \cdot \frac{1}{N\,|y_i|}$——这就是"候选等权"在梯度上的样子。

# %%
trace_gen = torch.Generator().manual_seed(11)
B, G, T = 2, 4, 6
trace_rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.5, 0.0, 1.0])               # [B*G]
trace_ids = torch.arange(B).repeat_interleave(G)                                       # [B*G]
trace_lengths = torch.tensor([2, 6, 3, 5, 4, 6, 1, 3])                                 # [B*G]
trace_mask = torch.arange(T).unsqueeze(0) < trace_lengths.unsqueeze(1)                 # [B*G, T]
trace_old = -torch.rand(B * G, T, generator=trace_gen) * 2                             # [B*G, T]
trace_new = (trace_old + torch.randn(B * G, T, generator=trace_gen) * 0.25).requires_grad_(True)
trace_ref = trace_old + torch.randn(B * G, T, generator=trace_gen) * 0.3

trace_loss, trace_adv = compute_grpo_loss(trace_new, trace_old, trace_rewards, trace_ids, trace_mask,
                                          clip_range=0.2, log_probs_ref=trace_ref, beta=0.04)
valid_ratio = torch.exp(trace_new - trace_old)[trace_mask].detach()
clipped_fraction = ((valid_ratio > 1.2) & (trace_adv.repeat_interleave(trace_lengths) > 0)
                    | (valid_ratio < 0.8) & (trace_adv.repeat_interleave(trace_lengths) < 0)).float().mean()
print("grouped_rewards =", trace_rewards.view(B, G).tolist())
print("advantages      =", [round(a, 3) for a in trace_adv.tolist()])
print(f"ratio min/max   = {valid_ratio.min().item():.3f} / {valid_ratio.max().item():.3f}")
print(f"clip fraction   = {clipped_fraction.item():.3f}")
print(f"kl mean         = {token_kl_penalty(trace_new.detach(), trace_ref)[trace_mask].mean().item():.4f}")
print(f"grpo loss       = {trace_loss.item():.4f}")
for group in trace_adv.view(B, G):
    assert abs(group.sum().item()) < 1e-5  # advantages are centred in every group

# Gradient at ratio = 1 (new == old), no KL: -A_i / (N * |y_i|) on every valid token.
at_old = trace_old.clone().requires_grad_(True)
loss_at_old, adv_at_old = compute_grpo_loss(at_old, trace_old, trace_rewards, trace_ids, trace_mask)
loss_at_old.backward()
expected_grad = -adv_at_old.unsqueeze(1) * trace_mask / (B * G * trace_lengths.unsqueeze(1))  # [B*G, T]
assert_close(at_old.grad, expected_grad, atol=1e-7, what="rho = 1 处的梯度 -A_i / (N |y_i|)")
print("每个回答第一个词元的梯度 =", [round(g, 4) for g in at_old.grad[:, 0].tolist()])
print("长度 =", trace_lengths.tolist(), "：同样的优势，越短的回答每个词元的梯度越大")

# %%
print(f"本笔记从第一个代码单元运行到这里用了 {time.perf_counter() - _lesson_started:.1f} 秒（本机此刻的负载下实测，不含内核启动）")

# %% [markdown]
# ---
#
# # 🛑 STOP HERE 🛑
#
# 本课到此结束：完成上面的两个 TODO 并让所有可见测试通过后提交。隐藏测试在评分时运行。

# %% [markdown] tags=["solution-only"]
# ## 解析
#
# ### TODO 1　`token_kl_penalty`
#
# 核心只有两行：`delta = ref_logps.detach() - policy_logps`，返回 `torch.exp(delta) - delta - 1`。
# `detach()` 保证即使调用者传入了带梯度的参考对数概率，参考策略也不会被更新。
# 对当前策略的梯度是 $1 - e^{d}$：当前策略给这个词元的概率高于参考策略（$d<0$）时梯度为正，梯度下降把它往回拉。
# 形状检查防止一个 `[N, T]` 与 `[N, 1]` 的输入被悄悄广播成一个看起来合理、实际错误的结果。
#
# ### TODO 2　`compute_grpo_loss`
#
# 1. **契约**：提供的 `check_grpo_inputs` 负责形状、数值参数、有限性与掩码（必须是布尔张量：参考章节的契约，约定卡 C1 的例外）；
#    你写的两条是本课内容本身：`beta > 0` 而没有参考策略（KL 无从计算，悄悄忽略会让人以为 KL 在起作用），
#    以及空行（候选等权的"每个候选的均值"在空行上没有定义；第 3 课的 TRL 家族函数改用 `clamp(min=1)`，让空行贡献 0）。
# 2. **优势**：调用提供的 `compute_group_advantages`（它也检查奖励的有限性与 `eps`），并 `detach()`——优势是常数权重。
# 3. **概率比**：`torch.exp(torch.where(mask, log_probs_new - log_probs_old.detach(), 0))`：先掩码、后 `exp`。
#    测试里有用例让新旧对数概率来自同一个计算图，不 `detach` 时梯度恰好为 0（第 1 步的演示），另一个用例检查 `log_probs_old.grad is None`。
# 4. **裁剪目标**：`torch.minimum(ratio * A, ratio.clamp(1 - ε, 1 + ε) * A)`，`A` 用 `unsqueeze(-1)` 广播到 `[N, 1]`。
#    取相反数得到逐词元损失；`beta > 0` 时加上 `beta * token_kl_penalty(torch.where(mask, log_probs_new, ref), ref)`，
#    无效位置上 $d=0$，k3 与它的梯度都是 0。
# 5. **汇总**：`torch.where(mask, per_token_loss, 0)` 清零无效位置，`sum(dim=-1) / mask.sum(dim=-1)` 得到每个候选的均值，
#    最后 `.mean()`。契约已经保证每行至少一个有效词元，所以不需要 `clamp(min=1)`。
#
# 常见错误（隐藏测试会抓到）：
#
# - **词元平均**：`(per_token_loss * mask).sum() / mask.sum()`。变长掩码的随机用例与参考值不符；
#   可见测试里"长短候选等权"的用例会得到 $1/3$ 而不是 0，测试信息会直接点出这一点。
# - **旧策略没有 `detach`**：`log_probs_old.grad` 不再是 `None`；新旧共享计算图时梯度消失。
# - **KL 的条件写错**：`beta > 0` 而参考策略为 `None` 时应抛出 `ValueError`；只看参考策略而忽略 `beta == 0` 时多加了一项。
# - **先 `exp` 后掩码**：`torch.where(mask, torch.exp(new - old), 1)` 或乘以掩码，前向数值相同，但无效位置上有 800 这样的值时
#   `exp` 溢出成 `inf`，反向传播 $0\times\infty$ 得到 NaN 梯度。掩码必须作用在 `exp` 的**输入**上。
#
# ### 这一课与 TRL、MiniMind 的对应
#
# | 本课 | TRL `GRPOTrainer` | MiniMind `train_grpo.py` |
# | --- | --- | --- |
# | `clip_range` | `epsilon`（上界可用 `epsilon_high` 单独设置） | `args.epsilon` |
# | `beta` | `beta` | `args.beta` |
# | `response_mask` | `completion_mask` | `completion_mask` |
# | 候选等权 | `loss_type="grpo"`（注意：TRL 当前的默认值是 `"dapo"`，一种词元平均） | 默认做法 |
# | `beta` 的默认值 | 0.0（此时不加载参考模型） | 训练脚本参数 `args.beta`，KL 项总是计算 |
# | k3 KL | `per_token_kl`（`beta != 0` 时；默认 `use_bias_correction_kl=True`，乘以概率比） | `per_token_kl`（不乘概率比） |
#
# 第 3 课会在这个函数的基础上实现 CISPO 与其他 `loss_type`，并在最后一节把你的损失与 TRL 内部的计算逐项对照。
