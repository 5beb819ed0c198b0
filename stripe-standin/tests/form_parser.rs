//! The bracket-notation parser, through the public `form` module.

use serde_json::json;
use stripe_standin::form::parse;

#[test]
fn nested_arrays_of_hashes_and_empty_values_are_parsed_like_stripe_does() {
    let parsed = parse(
        "items[0][id]=si_1&items[0][deleted]=true&items[1][price]=price_2&items[1][metadata][k]=v\
         &pause_collection=&expand[]=latest_invoice&expand[]=customer&recurring[interval]=month",
    )
    .expect("parses");
    assert_eq!(
        parsed,
        json!({
            "items": [
                {"id": "si_1", "deleted": "true"},
                {"price": "price_2", "metadata": {"k": "v"}}
            ],
            "pause_collection": "",
            "expand": ["latest_invoice", "customer"],
            "recurring": {"interval": "month"}
        })
    );
}

#[test]
fn deeply_nested_arrays_keep_index_order() {
    let parsed = parse("a[2][b][1]=z&a[0][b][0]=x&a[0][b][1]=y&a[2][b][0]=w").expect("parses");
    assert_eq!(parsed, json!({"a": [{"b": ["x", "y"]}, {"b": ["w", "z"]}]}));
}

#[test]
fn percent_encoded_brackets_and_values_are_decoded() {
    let parsed = parse("metadata%5Bnote%5D=a%26b+c&email=x%40example.com").expect("parses");
    assert_eq!(parsed, json!({"metadata": {"note": "a&b c"}, "email": "x@example.com"}));
}

#[test]
fn malformed_input_is_an_error_rather_than_a_panic() {
    for bad in ["a[b=1", "[x]=1", "a=1&a[b]=2", "a[b]=2&a=1", "a=%zz", "a=%e2%28"] {
        assert!(parse(bad).is_err(), "{bad} should be rejected");
    }
}
