//! Maud views for the Member Console.
//!
//! Views take plain view-model structs and return [`Markup`]; they never touch the database or
//! the request. All data goes through maud's escaping; `PreEscaped` is used only for markup this
//! crate builds itself.

pub use maud::{DOCTYPE, Markup, PreEscaped, html};

pub mod charts;
pub mod components;
pub mod forms;
pub mod layout;
pub mod letter;
pub mod pages;
pub mod paths;

/// Currencies counted in whole units (no minor unit).
pub use pages::billing::ZERO_DECIMAL as ZERO_DECIMAL_CURRENCIES;
mod text;
pub use text::{Amount, entitlement_value, grouped, usage_value};

pub use components::{
    Column, Keyset, Tone, badge, facts, keyset_pagination, notice, progress, refusal, table, table_cols,
};
pub use forms::{FormState, Input, csrf_field, form_errors, input_field};
pub use layout::{NavLink, Page, SignedIn, bare_page, page, page_or_partial};
pub use pages::{
    // Issue 38, the account page and the operators' accounts.
    account::{
        AccountEventLine, AccountListLine, AccountListView, AccountPageView, MembershipLine, OperatorAccountView,
        SessionLine, account_acts, account_list, account_page, account_results, delete_form as account_delete_form,
        email_form as account_email_form, operator_account, password_form as account_password_form,
    },
    auth::{LoginView, login},
    billing::{
        BillingView, ChangeNote, CheckoutNote, InvoiceLine, LadderOffers, Offer, OpEventRow, OpOutboxRow,
        OpSubscriptionRow, OperatorBillingView, OrgBilling, PriceRow, ProductPricesView, ScheduledLine, SeatsLine,
        StripeState, SubscriptionLine, SwitchConfirmView, member_billing, money, operator_billing, price_words,
        product_prices, product_with_prices, subscription_status_words, switch_confirm,
    },
    catalog::{
        CatalogView, ProductEditView, ProductRow, ResourceKeyRow, RuleEditRow, RuleRow, SetEditView, SetRow, Total,
        catalog, key_form, key_label_form, key_label_panel, product_edit, product_form, set_edit, set_form,
    },
    connections::{
        ConnectionFiguresView, ConnectionListRow, ConnectionView, ConnectionsView, PreviousSecret, RecipientRow,
        TestResultView, add_form as connection_add_form, connection_href, connection_list, connection_page,
        delete_form as connection_delete_form, edit_form as connection_edit_form,
        rotate_form as connection_rotate_form,
    },
    errors::error_body,
    farm::{DriftRow, FarmDriftView, FarmRunRow, FarmView, WatchedClaimRow, operator_farm},
    grants::{
        GrantDetailView, GrantEventRow, GrantListRow, GrantListView, IssueGrantView, LineageRow, grant_detail,
        grant_list, grant_rows_table, issue_grant, manage_form, revoke_form,
    },
    home::{DisplacedLine, HomeView, OrgHome, PlanLine, displaced_notes, member_home},
    // Issue 38, members.
    members::{
        AcceptCase, AcceptView, MemberLine, MembersView, OperatorInvite, PendingLine, invitation_page,
        invitation_problem, invite_form, members_not_owner, members_page, operator_invitations, operator_invite_page,
    },
    operator::{AccountRow, FailedJob, JobCounts, OperatorHomeView, Subsystem, operator_home},
    organizations::{
        DisplacedRow, EntitlementRow, MemberRow, OrgDetailView, OrgListRow, OrgListView, PositionRow, UsageRow,
        create_organization_form, organization_detail, organization_list, organization_results,
    },
    plan_acts::{
        FailedOrganization, ObligationCounts, PlanActRow, PlanActView, plan_act_list, plan_act_page, plan_act_progress,
    },
    rule_changes::{
        ActProgress, FailedPool, RuleChangeListRow, RuleChangeView, rule_change_list, rule_change_page,
        rule_change_progress,
    },
    // Issue 38, sign-up, verification and password reset.
    signup::{ForgotView, LinkView, SignupView, forgot, link_page, link_refused, resent, signup, unverified_banner},
    sites::{
        DomainLine, DomainNotice, Hostname, OrgSites, RequestLine, SiteLine, SitesView, member_sites, sites_section,
    },
    topology::{
        ActReachPreview, Choice, LadderView, OrgTypeRow, Placed, SignupTypeView, TierAddPreview, TierRemovalPreview,
        TierRow, TopologyView, act_reach_preview, add_tier_form, default_change_form, delete_tier_form,
        ladder_order_form, remove_tier_form, tier_add_preview, tier_order_form, tier_removal_preview, topology,
    },
};
